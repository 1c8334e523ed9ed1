"""Names vulture (`make lint`: dead code) reports that are used by something it cannot see: a
library calling a protocol method, a template reading a field, a getattr by name. Each line says who
uses it. vulture reads this file as code that uses the names; nothing imports it."""

_: object

_.writelines  # notee/api/http1.py: asyncio's transport calls it on the protocol uvicorn runs
_.already_subscribed  # notee/api/routes/subscriptions.py BulkOut: a response model's field (pydantic)
_.not_found  # notee/api/routes/subscriptions.py BulkOut: a response model's field (pydantic)
_.lines_done  # notee/api/routes/imports.py ImportOut: a response model's field (pydantic)
_.keep_alive  # notee/api/http1.py: uvicorn's RequestResponseCycle reads it (false: the answer closes the connection)
_.expirationTime  # notee/api/routes/devices.py WebPushSubscriptionIn: the browser's own field, accepted as it sends it (pydantic)
_.should_exit  # notee/api/server.py: uvicorn.Server's own flag, set to stop it
_.describe  # notee/core/metrics.py _ScrapeTime: prometheus_client's Collector protocol
_.rate_limit_send_rate  # notee/core/settings.py: read as getattr(settings, f"rate_limit_{klass}_rate")
_.rate_limit_send_burst
_.rate_limit_write_rate
_.rate_limit_write_burst
_.rate_limit_read_rate
_.rate_limit_read_burst
_.rate_limit_receipt_rate
_.rate_limit_receipt_burst
_.local_settings  # tests/unit/test_http2_framing.py: h2's H2Connection reads the settings it is given
_.connection_lost  # notee/emulator/peer.py, notee/providers/http2.py: asyncio.Protocol, the event loop calls it
_.trust_env  # notee/providers/fcm.py: requests.Session's attribute (no proxy, no global CA)
_.PRIORITY  # notee/providers/http2_wire.py: RFC 9113's frame type 2, so the frame types read as the RFC's table
_.oldest_queued_at  # notee/store/queue_overview.py: read by the console's health page (templates/health.html)
_.scheduled_jobs  # notee/store/queue_overview.py: read by the console's health page (templates/health.html)
_.svg  # notee/api/console/charts.py Chart: placed by the console's templates ({{ chart.svg|safe }})
_.OK  # notee/cli/remote_client.py ExitCode: the table of exit codes scripts read; 0 is returned by typer itself
_.clicked  # notee/api/routes/engagement.py CountsOut (and the SDK's EngagementCounts): response fields
_.dismissed
_.delivery_rate
_.open_rate
_.click_rate
_._utc  # notee/store/mysql.py: a SQLAlchemy "connect" event listener (registered by its decorator)

# tests and bench: test doubles and library hooks
_.get_write_buffer_size  # tests/support/loopback.py: asyncio's transport API, called by the protocol under test
_.handle_data  # tests/integration/test_console_compose.py: html.parser.HTMLParser calls it while parsing
_.handle_endtag  # tests/integration/test_console_compose.py: html.parser.HTMLParser calls it while parsing
_._split_scope  # tests/support/parallel.py: pytest-xdist's LoadScopeScheduling hook, overridden
_.restart  # tests/faults/conftest.py: the cluster's restart, for fault tests that need one
_.binary_location  # tests/support/browser.py: selenium's ChromeOptions field
_.do_POST  # tests/support/webhook_receiver.py: http.server calls it
_.log_message  # tests/support/webhook_receiver.py: http.server calls it
_.daemon_threads  # chaos/receiver.py: ThreadingHTTPServer reads it (a hanging request must not hold the exit)
_.handle_starttag  # tests/integration/test_docs_offline.py: html.parser calls it
_.executemany  # tests: a DBAPI cursor's method, replaced to count statements
_.depends_on  # tests/unit/test_http2_framing.py: an h2 PRIORITY frame's fields
_.stream_weight
_.APNS_SERVER  # aioapns' client protocol reads them (tests/{unit,integration}/test_providers_apns.py, bench/sender_cpu.py)
_.APNS_PORT
_.huffman  # bench: h2's encoder keyword, replaced by a lambda that ignores it
_.loop_iteration_limit  # notee/domain/liquid.py _Env: python-liquid's Environment reads its limits
_.output_stream_limit
_.local_namespace_limit
_.block_nesting_limit
_.context_depth_limit
_.context_class  # notee/domain/liquid.py _Template: python-liquid's BoundTemplate makes its render context from it
_.template_class  # notee/domain/liquid.py _Env: python-liquid's Environment makes its templates from it
_._srcfile  # notee/api/server.py: the logging module reads it (the logging HOWTO, "Optimization")

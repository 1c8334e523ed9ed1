-- Two kinds are checked by the code, not by CHECK constraints, so engagement (issue 36) can add to
-- them without copying a table: widening a CHECK copies the table and holds every write to it
-- meanwhile, while dropping one is instant (docs/DEPLOY.md "Online safety, measured").
-- webhook_delivery.event_type: the receipt.* events join the four (docs/WEBHOOKS.md "Engagement
-- events"); notee/core/vocabulary.py WEBHOOK_EVENTS, checked in notee/store/webhooks_sql.py and
-- notee/store/receipt_outbox_sql.py before they write.
ALTER TABLE webhook_delivery DROP CONSTRAINT IF EXISTS ck_webhook_delivery_type;
-- rate_limit.class: receipts get a class of their own, `receipt` (docs/API.md "Rate limits");
-- notee/core/vocabulary.py RATE_CLASSES, checked by notee/domain/ratelimit.py check_class.
ALTER TABLE rate_limit DROP CONSTRAINT IF EXISTS ck_rate_limit_class;

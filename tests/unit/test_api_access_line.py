"""The API's text access line: ``PlainAccessFormatter`` writes exactly what uvicorn's own
``AccessFormatter`` writes (it only skips its record copies), and ``notee api`` uses it."""

from __future__ import annotations

import importlib
import logging

import pytest
from uvicorn.logging import AccessFormatter

from notee.api.access import PlainAccessFormatter, uvicorn_log_config

FMT = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'


def _record(status: int, level: int = logging.INFO) -> logging.LogRecord:
    args = ("127.0.0.1:50123", "PUT", "/v1/users/u/subscriptions/topic/t/x?a=1", "1.1", status)
    return logging.LogRecord("uvicorn.access", level, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)


@pytest.mark.parametrize("status", [100, 103, 200, 201, 204, 304, 401, 404, 413, 422, 429, 500, 503, 599])
@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
def test_the_plain_line_is_uvicorns_line(status: int, level: int) -> None:
    ours, theirs = PlainAccessFormatter(FMT, use_colors=False), AccessFormatter(FMT, use_colors=False)
    assert ours.format(_record(status, level)) == theirs.format(_record(status, level))


def test_with_colours_it_is_uvicorns_formatting() -> None:
    ours, theirs = PlainAccessFormatter(FMT, use_colors=True), AccessFormatter(FMT, use_colors=True)
    assert ours.format(_record(201)) == theirs.format(_record(201))


def test_notee_api_text_logs_use_the_plain_formatter() -> None:
    config = uvicorn_log_config()
    assert config["formatters"]["access"]["()"] == "notee.api.access.PlainAccessFormatter"
    assert config["formatters"]["access"]["fmt"] == FMT
    module, _, name = config["formatters"]["access"]["()"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is PlainAccessFormatter

"""/docs and /redoc work without internet (issue 16.4): their HTML names only URLs of Notee itself,
and each of those answers 200 with the content type a browser needs to use it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

EXPECTED_TYPES = {
    ".js": ("text/javascript", "application/javascript"),
    ".css": ("text/css",),
    ".png": ("image/png",),
    ".json": ("application/json",),
}


class _Urls(HTMLParser):
    """Every src/href attribute, plus ReDoc's spec-url."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href", "spec-url") and v]


def referenced(html: str) -> list[str]:
    parser = _Urls()
    parser.feed(html)
    # Swagger UI's page names its document in the inline script: url: '/openapi.json'
    return parser.urls + re.findall(r"""\burl:\s*['"]([^'"]+)['"]""", html)


@pytest.mark.parametrize(("page", "assets"), [("/docs", 4), ("/redoc", 3)])
def test_the_docs_pages_load_every_asset_from_notee_itself(client, page, assets):
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), r.text[:200]
    urls = referenced(r.text)
    assert len(set(urls)) == assets, urls  # favicon, script (+ stylesheet), the OpenAPI document
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} names a URL off this server: {url}"
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.status_code)
        suffix = "." + url.rsplit(".", 1)[-1]
        content_type = answer.headers["content-type"].split(";")[0]
        assert content_type in EXPECTED_TYPES[suffix], (url, content_type)
        assert len(answer.content) > 1000 if suffix == ".js" else len(answer.content) > 0
    # Nothing else in the page reaches out either (fonts, CDNs, the online validator).
    for outside in ("http://", "https://", "cdn.", "fonts.googleapis", "unpkg", "validator.swagger.io"):
        assert outside not in r.text, f"{page} mentions {outside}"


def test_the_assets_are_swagger_ui_and_redoc(client):
    assert b"SwaggerUIBundle" in client.get("/docs-assets/swagger-ui-bundle.js").content
    assert b".swagger-ui" in client.get("/docs-assets/swagger-ui.css").content
    assert b"Redoc" in client.get("/docs-assets/redoc.standalone.js").content
    assert "validatorUrl" in client.get("/docs").text  # the online validator is switched off
    assert '"validatorUrl": null' in client.get("/docs").text


def test_the_assets_need_no_credentials_and_unknown_ones_are_404(client):
    assert client.get("/docs-assets/swagger-ui.css", headers={"Authorization": "Bearer wrong"}).status_code == 200
    assert client.get("/docs-assets/nosuch.js").status_code == 404
    assert client.get("/docs-assets/../pyproject.toml").status_code == 404

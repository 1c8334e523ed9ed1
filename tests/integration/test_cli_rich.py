"""The CLI's rich fields (docs/PAYLOADS.md): `notee template put --payload JSON`, and `notee send` /
`notee publish` with --payload and the flags of the common fields (--badge, --sound, --image,
--background), as a user runs them (subprocesses against a real `notee api`): what they send reaches
the API's rules (a bad field is the API's 422 naming it, exit 2)."""

from __future__ import annotations

import json

from tests.support.cli import notee, tenant_env


def test_template_payload_and_send_publish_flags_reach_the_api(admin_env, service_id):
    env = tenant_env(admin_env, service_id, "Rich")
    payload = {"android": {"channel_id": "orders"}, "ios": {"thread_id": "orders"}}
    put = notee(
        "template", "put", "SINGLE", "otp", "--title", "t", "--body", "b", "--payload", json.dumps(payload), env=env
    )
    assert put.returncode == 0, put.stderr
    assert json.loads(notee("template", "show", "SINGLE", "otp", env=env).stdout)["payload"] == payload
    notee("template", "put", "TOPIC", "news", "--title", "t", "--body", "b", env=env)
    user_id = notee("user", "put", "rich-1", env=env).stdout.strip()
    sent = notee("send", user_id, "otp", "--badge", "2", "--sound", "chime.caf", env=env)
    assert sent.returncode == 0 and sent.stdout.startswith("devices 0"), sent.stdout + sent.stderr
    bad = notee("send", user_id, "otp", "--payload", '{"android": {"color": "red"}}', env=env)
    assert bad.returncode == 2 and "payload.android.color" in bad.stderr, bad.stderr
    silent = notee("publish", "news", "all", "--background", env=env)  # the template has a title: not silent
    assert silent.returncode == 2 and "background" in silent.stderr, silent.stderr
    image = notee("publish", "news", "all", "--image", "http://not-https.example/a.png", env=env)
    assert image.returncode == 2 and "payload.image" in image.stderr, image.stderr
    not_json = notee("publish", "news", "all", "--payload", "{", env=env)
    assert not_json.returncode == 2 and "--payload" in not_json.stderr, not_json.stderr


def test_template_put_takes_variants_and_a_variants_own_ios_subtitle(admin_env, service_id):
    """`notee template put --variants JSON --subtitle LOCALE=TEXT`: the variant's own subtitle is saved,
    read back, shown in a dry run for that locale only, and checked by the API (a bad one: its 422)."""
    env = tenant_env(admin_env, service_id, "RichVariants")
    variants = {
        "de": {"title": "Bestellung {{order}}", "body": "Versandt"},
        "fr": {"title": "Commande", "body": "Partie"},
    }
    put = notee(
        "template", "put", "TOPIC", "ship", "--title", "Order {{order}}", "--body", "Shipped",
        "--payload", json.dumps({"ios": {"subtitle": "Your order"}}),
        "--variants", json.dumps(variants), "--subtitle", "de=Bestellung {{order}} ist unterwegs", env=env,
    )  # fmt: skip
    assert put.returncode == 0, put.stderr
    saved = json.loads(notee("template", "show", "TOPIC", "ship", env=env).stdout)
    assert saved["variants"]["de"]["subtitle"] == "Bestellung {{order}} ist unterwegs"
    assert saved["variants"]["fr"].get("subtitle") is None and saved["payload"] == {"ios": {"subtitle": "Your order"}}
    dry = notee("publish", "ship", "all", "--var", "order=42", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    de = next(i for i, line in enumerate(lines) if line.startswith("[de]"))
    fr = next(i for i, line in enumerate(lines) if line.startswith("[fr]"))
    assert lines[de + 1] == "  iOS subtitle: 'Bestellung 42 ist unterwegs'", dry.stdout
    assert lines[fr + 1] == "  iOS subtitle: 'Your order'", dry.stdout  # no own subtitle: the payload's

    nowhere = notee("template", "put", "TOPIC", "ship", "--title", "t", "--body", "b", "--subtitle", "it=Ciao", env=env)
    assert nowhere.returncode == 2 and "--subtitle" in nowhere.stderr and "'it'" in nowhere.stderr, nowhere.stderr
    two_lines = notee(
        "template", "put", "TOPIC", "ship", "--title", "t", "--body", "b",
        "--variants", json.dumps(variants), "--subtitle", "de=a\nb", env=env,
    )  # fmt: skip
    assert two_lines.returncode == 2 and "variants.de.subtitle" in two_lines.stderr, two_lines.stderr
    still = json.loads(notee("template", "show", "TOPIC", "ship", env=env).stdout)
    assert still["variants"]["de"]["subtitle"] == "Bestellung {{order}} ist unterwegs"  # nothing written

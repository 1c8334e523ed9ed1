"""The hostile-client checks of the ledger (``chaos.hostile`` wrote the lines): each probe got its
documented answer, the flood's address was capped, and the tenants' requests to the attacked API kept
their latency meanwhile. Pure, like ``chaos.ledger``: tests/unit/test_chaos_ledger.py."""

from __future__ import annotations

from chaos.ledger import Event, Ledger, Result, Violation, faults_between

LATENCY_FACTOR, LATENCY_SLACK_MS = 3.0, 100.0  # the attacked API's tenant p50 may grow this much, no more


def _phase(led: Ledger, h: Event) -> tuple[float, float]:
    """The hostile fault's window holding probe line ``h`` (the line is written when the probe ends)."""
    for f in led.faults:
        if f["name"] == "hostile" and f["t_start"] <= h.get("t", 0.0) <= (f.get("t_end") or h.get("t", 0.0)) + 1:
            return f["t_start"], f.get("t_end") or h["t"]
    return h.get("t", 0.0) - 60, h.get("t", 0.0)


def _excused(led: Ledger, h: Event) -> set[int]:
    """Answers a fault explains: an API process killed or stopped meanwhile (no answer, 0; or its
    503 while it stops), MySQL down while the credentials are checked (503 store_unavailable)."""
    start, end = _phase(led, h)
    excused: set[int] = set()
    for f in faults_between(led, start, end):
        if f["name"] in ("sigkill", "sigterm") and str(f.get("target", "")).startswith("api"):
            excused |= {0, 503}
        elif f["name"] == "mariadb_restart":
            excused.add(503)
    return excused


def check_hostile(led: Ledger) -> Result:
    """Each probe gets its documented answer (``expect``): body probes 413/422/400/414, never a 5xx and
    never a 429 (they come from an address of their own, under the cap); the connection probes may
    be capped (429) and the flood must be; a closed connection or a 503 only while a fault explains it."""
    res = Result("hostile clients get their documented answers")
    for h in led.hostile:
        res.checked += int(h.get("sent", 0))
        statuses = {int(code): int(n) for code, n in (h.get("statuses") or {}).items() if n}
        res.measured[h["probe"]] = h.get("statuses")
        expect = set(h.get("expect") or [])
        if h["probe"] == "connection flood":  # 503 over the address's requests in progress: documented
            expect.add(503)  # (the lines of the first run with own addresses did not list it)
        if not expect:  # a line of an older run: refused cleanly is all it promised
            expect = {code for code in statuses if code < 500 or code == 503}
        bad = {code: n for code, n in statuses.items() if code not in expect and code not in _excused(led, h)}
        if bad:
            detail = f"{h['probe']} (from {h.get('source', '?')}): answered {bad}, documented {sorted(expect)}"
            res.violations.append(Violation(res.invariant, h.get("t", 0.0), detail))
        if (
            h["probe"] == "connection flood"
            and not statuses.get(429)
            and statuses.get(0, 0) * 2 < int(h.get("sent", 0))
        ):
            detail = f"connection flood of {h.get('sent')} from {h.get('source', '?')} never capped: {statuses}"
            res.violations.append(Violation(res.invariant, h.get("t", 0.0), detail))
    return res


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def check_hostile_latency(led: Ledger) -> Result:
    """The tenants' requests to the attacked API (from 127.0.0.1) keep their latency while the hostile
    phase runs: p50 inside the phase at most ``LATENCY_FACTOR`` x outside + ``LATENCY_SLACK_MS``; p99
    reported both ways. Requests overlapping any other fault are left out of both sides (a MariaDB
    restart or a provider storm slows them for reasons of their own)."""
    res = Result("tenants' latency on the attacked API stays normal")
    apis = {h.get("api") for h in led.hostile if h.get("api")}
    phases = [(f["t_start"], f.get("t_end") or f["t_start"]) for f in led.faults if f["name"] == "hostile"]
    others = [
        (f["t_start"] - 1, (f.get("t_end") or f["t_start"]) + 5)
        for f in led.faults
        if f["name"] not in ("hostile", "clock_skew")
    ]
    inside: list[float] = []
    outside: list[float] = []
    for r in led.reqs:
        if r.get("api") not in apis or not r.get("status") or "ms" not in r:
            continue
        t = float(r["t"])
        if any(a <= t <= b for a, b in others):
            continue
        (inside if any(a <= t <= b for a, b in phases) else outside).append(float(r["ms"]))
    res.checked = len(inside)
    p50_in, p50_out = percentile(inside, 0.5), percentile(outside, 0.5)
    res.measured.update(
        requests=f"{len(inside)} during the phase, {len(outside)} outside",
        p50_ms=f"{p50_in:.1f} during, {p50_out:.1f} outside",
        p99_ms=f"{percentile(inside, 0.99):.1f} during, {percentile(outside, 0.99):.1f} outside",
    )
    if len(inside) >= 20 and len(outside) >= 20 and p50_in > LATENCY_FACTOR * p50_out + LATENCY_SLACK_MS:
        detail = f"p50 {p50_in:.1f} ms during the hostile phase, {p50_out:.1f} ms outside"
        res.violations.append(Violation(res.invariant, phases[0][0] if phases else 0.0, detail))
    return res

"""`rowbeam farm status DIR`: per shard done / quarantined / failed / refused / running / died / pending, events/s, ETA."""
from __future__ import annotations

import os
import platform

from .plan import load_plan
from .worker import read_status


def _alive(pid) -> bool:
    """The process exists and is no zombie (a killed worker its parent has not reaped yet is dead)."""
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def farm_status(plan_dir) -> dict:
    """{shards: [{id, scenario, sensor, events, state, attempts, seconds}], counts, events_done, events_total,
    events_per_s_per_worker (done events / summed shard wall seconds), eta_s_one_worker (remaining events / that
    rate; divide by the workers running at once)}."""
    plan, plan_dir = load_plan(plan_dir)
    rows, done_events, seconds = [], 0, 0.0
    for sh in plan["shards"]:
        st = read_status(plan_dir, sh["id"]) or {}
        state = st.get("state", "pending")
        if state == "running" and st.get("host") == platform.node() and not _alive(st.get("pid")):
            state = "died"                 # its worker is gone from this host: `farm run` reruns it (resumes)
        rows.append({"id": sh["id"], "scenario": sh["scenario"], "sensor": sh["sensor"], "events": sh["count"],
                     "state": state, "attempts": st.get("attempts", 0), "seconds": st.get("seconds"),
                     "quarantined": [q["sample_id"] for q in st.get("quarantined", [])],
                     **({"killed_by": st["killed_by"]} if "killed_by" in st else {})})
        if state in ("done", "quarantined"):
            done_events += sh["count"]
            seconds += float(st.get("seconds") or 0.0)
    total = sum(sh["count"] for sh in plan["shards"])
    rate = done_events / seconds if seconds > 0 else None
    counts = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return {"plan_sha256": plan["plan_sha256"], "shards": rows, "counts": counts, "events_done": done_events,
            "events_total": total, "events_per_s_per_worker": rate,
            "eta_s_one_worker": (total - done_events) / rate if rate else None}


def status_lines(s: dict) -> list[str]:
    lines = []
    for r in s["shards"]:
        took = "" if r["seconds"] is None else f"  {r['seconds']:.1f} s"
        q = f"  quarantined: {', '.join(r['quarantined'])}" if r["quarantined"] else ""
        state = f"{r['state']} (killed by {r['killed_by']})" if r["state"] == "died" and "killed_by" in r else r["state"]
        lines.append(f"{r['id']}  {r['scenario']}/{r['sensor']}  {r['events']} event(s)  {state}{took}"
                     f"  attempts {r['attempts']}{q}")
    rate = s["events_per_s_per_worker"]
    eta = s["eta_s_one_worker"]
    lines.append(f"shards: {', '.join(f'{k} {v}' for k, v in sorted(s['counts'].items()))}; events "
                 f"{s['events_done']}/{s['events_total']}; "
                 + (f"{rate:.3g} events/s per worker; ETA {eta:.0f} s on one worker" if rate else "no rate yet"))
    return lines

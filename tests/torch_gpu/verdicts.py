"""Turns the work files of run.sh into verdicts.md and verdicts.json; exit 1 on a disagreement.

    python verdicts.py WORK_DIR OUT_DIR NAME...

For each program NAME (cases/NAME.py), WORK_DIR holds what run.sh left:
  NAME.plainK.log/.rc/.time   K-th plain run (its RESULT and NOTE lines)
  NAME.streamsan.log/.rc/.json/.time   the run under `python -m streamsan.torch --format json`
  NAME.csan.log/.rc/.time     the run under TORCH_CUDA_SANITIZER=1 (absent with SKIP_CSAN=1)
and env.txt (the machine). Expectations: a `*_racy` program has a race (streamsan: races >= 1
in the JSON summary and exit 66), a `*_fixed` program has none (no race, exit 0) and prints
RESULT ok in every plain run. CSAN's verdict is recorded for comparison and never fails the run.
Only the standard library is used.
"""

import datetime
import json
import os
import sys

CSAN_MARK = "CSAN detected a possible data race"
RACE_EXIT = 66


def read(path, default=None):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def rc_of(path):
    text = read(path)
    try:
        return int(text.strip())
    except (AttributeError, ValueError):
        return None


def seconds(path):
    try:
        start, end = (float(v) for v in read(path, "").split())
        return round(end - start, 2)
    except ValueError:
        return None


def lines_with(text, prefix):
    return [l.strip() for l in (text or "").splitlines() if l.startswith(prefix)]


def tail(text, n=15):
    return "\n".join((text or "").rstrip().splitlines()[-n:])


def plain_runs(work, name):
    runs = []
    for k in range(1, 1000):
        log = read(os.path.join(work, f"{name}.plain{k}.log"))
        if log is None:
            break
        rc = rc_of(os.path.join(work, f"{name}.plain{k}.rc"))
        results = lines_with(log, "RESULT ")
        if results and rc == 0:
            outcome = "ok" if results[-1] == "RESULT ok" else "WRONG"
        else:
            outcome = f"failed (exit {rc})"
        runs.append({
            "exit": rc,
            "outcome": outcome,
            "result": results[-1] if results else None,
            "notes": lines_with(log, "NOTE "),
            "seconds": seconds(os.path.join(work, f"{name}.plain{k}.time")),
            "log_tail": None if outcome in ("ok", "WRONG") else tail(log),
        })
    return runs


def streamsan_run(work, name, racy):
    log = read(os.path.join(work, f"{name}.streamsan.log"))
    rc = rc_of(os.path.join(work, f"{name}.streamsan.rc"))
    raw = read(os.path.join(work, f"{name}.streamsan.json"))
    report, problem = None, None
    if raw is None:
        problem = "no JSON report was written"
    else:
        try:
            report = json.loads(raw)
            int(report["summary"]["races"])
        except (ValueError, KeyError, TypeError) as e:
            problem = f"the JSON report does not parse as docs/report-format.md says: {e!r}"
            report = None
    if report is not None:
        races = report["summary"]["races"]
        kinds = sorted({r.get("kind", "?") for r in report.get("races", [])})
        warnings = report["summary"].get("warnings", len(report.get("warnings", [])))
        shown = f"{races} race{'s' if races != 1 else ''}"
        if kinds:
            shown += f" ({', '.join(kinds)})"
        if warnings:
            shown += f", {warnings} warning{'s' if warnings != 1 else ''}"
        shown += f", exit {rc}"
        if racy:
            agrees = races >= 1 and rc == RACE_EXIT
        else:
            agrees = races == 0 and rc == 0
    else:
        races, kinds, warnings, agrees = None, [], None, False
        shown = f"{problem}, exit {rc}"
    return {
        "exit": rc,
        "races": races,
        "kinds": kinds,
        "warnings": warnings,
        "shown": shown,
        "agrees": agrees,
        "results": lines_with(log, "RESULT "),
        "report": report,
        "seconds": seconds(os.path.join(work, f"{name}.streamsan.time")),
        "log_tail": None if agrees else tail(log),
    }


def csan_run(work, name, racy):
    log = read(os.path.join(work, f"{name}.csan.log"))
    if log is None:
        return None
    rc = rc_of(os.path.join(work, f"{name}.csan.rc"))
    flagged = CSAN_MARK in log
    if flagged:  # which accesses it flagged is in the log: see README.md for r08
        shown = "flagged" + ("" if racy else " (false alarm)")
    elif rc == 0:
        shown = "clean" + (" (missed)" if racy else "")
    else:
        shown = f"failed, exit {rc}"
    return {
        "exit": rc,
        "flagged": flagged,
        "agrees": flagged == racy and (flagged or rc == 0),
        "shown": shown,
        "results": lines_with(log, "RESULT "),
        "seconds": seconds(os.path.join(work, f"{name}.csan.time")),
        "log_tail": None if flagged or rc == 0 else tail(log),
    }


def summarize_plain(runs):
    outcomes = [r["outcome"] for r in runs]
    if not outcomes:
        return "not run"
    if len(set(outcomes)) == 1:
        return f"{outcomes[0]} ×{len(outcomes)}"
    return ", ".join(outcomes)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    work, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    names = sorted(names, key=lambda n: (n.rsplit("_", 1)[0], not n.endswith("_racy")))
    os.makedirs(out, exist_ok=True)
    rows, problems = [], []
    for name in names:
        racy = name.endswith("_racy")
        rule = name.rsplit("_", 1)[0]
        plain = plain_runs(work, name)
        ss = streamsan_run(work, name, racy)
        cs = csan_run(work, name, racy)
        row = {"case": rule, "program": name, "twin": "racy" if racy else "fixed",
               "expected": "race" if racy else "no race", "plain": plain, "streamsan": ss,
               "csan": cs}
        row_problems = []
        if not ss["agrees"]:
            wanted = "a race and exit 66" if racy else "no race and exit 0"
            row_problems.append(f"streamsan: expected {wanted}, got {ss['shown']}")
        for k, r in enumerate(plain, 1):
            if r["outcome"].startswith("failed"):
                row_problems.append(f"plain run {k} {r['outcome']}")
            elif not racy and r["outcome"] != "ok":
                row_problems.append(f"plain run {k} of a fixed program: {r['result']}")
        row["problems"] = row_problems
        problems += [(name, p) for p in row_problems]
        rows.append(row)

    env = read(os.path.join(work, "env.txt"), "").strip().splitlines()
    racy_rows = [r for r in rows if r["twin"] == "racy"]
    fixed_rows = [r for r in rows if r["twin"] == "fixed"]
    def every_run(row, outcome):
        return bool(row["plain"]) and all(p["outcome"] == outcome for p in row["plain"])

    shown_wrong = sum(1 for r in racy_rows if every_run(r, "WRONG"))
    fixed_ok = sum(1 for r in fixed_rows if every_run(r, "ok"))
    ss_agree = sum(1 for r in rows if r["streamsan"]["agrees"])
    csan_rows = [r for r in rows if r["csan"] is not None]
    csan_agree = sum(1 for r in csan_rows if r["csan"]["agrees"])

    md = ["# streamsan's PyTorch front end: GPU proof runs", ""]
    md.append(f"Date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}")
    md += [f"- {l}" for l in env]
    md += ["",
           f"- streamsan verdict as expected: **{ss_agree} of {len(rows)}** programs "
           "(racy: races ≥ 1 and exit 66; fixed: no race and exit 0).",
           f"- CSAN (TORCH_CUDA_SANITIZER=1) verdict as expected: {csan_agree} of {len(csan_rows)}"
           " (for comparison only).",
           f"- Plain runs: racy programs that printed RESULT WRONG in every run: {shown_wrong} of "
           f"{len(racy_rows)}; fixed programs that printed RESULT ok in every run: {fixed_ok} of "
           f"{len(fixed_rows)}.",
           "",
           "| case | twin | expected | plain runs | streamsan | CSAN | as expected |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        csan = r["csan"]["shown"] if r["csan"] else "not run"
        md.append(f"| {r['case']} | {r['twin']} | {r['expected']} | "
                  f"{summarize_plain(r['plain'])} | {r['streamsan']['shown']} | {csan} | "
                  f"{'yes' if not r['problems'] else '**NO**'} |")
    md += ["", "## Problems", ""]
    if not problems:
        md.append("None.")
    for r in rows:
        if not r["problems"]:
            continue
        md.append(f"### {r['program']}")
        md += [f"- {p}" for p in r["problems"]]
        for label, log in [("streamsan run", r["streamsan"]["log_tail"])] + [
                (f"plain run {k}", p["log_tail"]) for k, p in enumerate(r["plain"], 1)]:
            if log:
                md += ["", f"{label}, last lines:", "", "```", log, "```"]
        md.append("")
    details_at = len(md)
    md += ["", "## Details", "",
           "RESULT and NOTE lines of every plain run, the streamsan run's RESULT lines, the CSAN "
           "run's, and the seconds each took.", ""]
    for r in rows:
        md.append(f"- **{r['program']}**")
        for k, p in enumerate(r["plain"], 1):
            notes = "; ".join(p["notes"])
            md.append(f"  - plain {k} ({p['seconds']} s): {p['result'] or p['outcome']}"
                      + (f"; {notes}" if notes else ""))
        ss = r["streamsan"]
        md.append(f"  - streamsan ({ss['seconds']} s): {ss['shown']}; "
                  f"{'; '.join(ss['results']) or 'no RESULT line'}")
        if ss["report"]:
            for race in ss["report"].get("races", [])[:4]:
                cur, prev = race.get("current") or {}, race.get("previous") or {}
                md.append(f"    - {race.get('kind')} on buffer {race.get('buffer')} "
                          f"{race.get('range')}: {cur.get('name')} at {cur.get('at')} vs "
                          f"{prev.get('name')} at {prev.get('at')}")
        if r["csan"]:
            cs = r["csan"]
            md.append(f"  - CSAN ({cs['seconds']} s): {cs['shown']}; "
                      f"{'; '.join(cs['results']) or 'no RESULT line'}")
    md.append("")

    with open(os.path.join(out, "verdicts.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "verdicts.json"), "w", encoding="utf-8") as f:
        json.dump({"environment": env, "programs": rows}, f, indent=1)
    print("\n".join(md[:details_at]))  # the Details section is in the file only
    if problems:
        print(f"{len(problems)} problem(s): see the Problems section", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

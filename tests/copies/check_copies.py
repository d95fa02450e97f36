#!/usr/bin/env python3
"""Runs tests/copies/copies_main (four copies of cuprof's headers in one
process) and checks that they made one session: one trace with every copy's
scope, written once, and a CUDA status that says why when CUDA is not traced.
  check_copies.py MAIN PLUGIN SCRATCH_DIR"""
import json
import os
import re
import subprocess
import sys

SCOPES = ["exe_scope", "lib_scopes_scope", "lib_runtime_scope", "plugin_scope"]


def run(args, env_extra):
    env = dict(os.environ)
    env.pop("CUPROF_TRACE", None)
    env.update(env_extra)
    r = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, r.stdout


def check_trace(label, path, said):
    problems = []
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    for name in SCOPES:
        n = sum(1 for e in spans if e["name"] == name)
        if n != 1:
            problems.append(f"{label}: {n} spans named {name}, expected 1")
    exe = [e for e in spans if e["name"] == "exe_scope"]
    for e in spans:  # every library scope lies inside the executable's scope
        if exe and e["name"] != "exe_scope" and not (exe[0]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= exe[0]["ts"] + exe[0]["dur"] + 0.001):
            problems.append(f"{label}: {e['name']} lies outside exe_scope")
    status = doc.get("cuprof", {}).get("cuda_status")
    off = re.findall(r"CUDA tracing is off: (.*?); ", said)
    if off:
        if not off[0].strip():
            problems.append(f"{label}: 'CUDA tracing is off' without a reason")
        if status != off[0]:
            problems.append(f"{label}: metadata cuda_status {status!r} differs from the message's {off[0]!r}")
    if len(off) > 1:
        problems.append(f"{label}: the CUDA status was said {len(off)} times")
    return problems


def main():
    main_exe, plugin, scratch = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    problems = []

    at_exit = os.path.join(scratch, "autostart.json")
    if os.path.exists(at_exit):
        os.remove(at_exit)
    rc, said = run([main_exe, "autostart", plugin], {"CUPROF_TRACE": at_exit, "CUPROF_TABLE": "0"})
    if rc != 0:
        problems.append(f"autostart: exit status {rc}")
    written = said.count("trace written to")
    if written != 1:
        problems.append(f"autostart: {written} 'trace written' lines, expected 1")
    if os.path.exists(at_exit):
        problems += check_trace("autostart", at_exit, said)
    else:
        problems.append("autostart: no trace")

    own = os.path.join(scratch, "library_profile.json")
    rc, said2 = run([main_exe, "library_profile", plugin, own], {})
    if rc != 0:
        problems.append(f"library_profile: exit status {rc}")
    if os.path.exists(own):
        problems += check_trace("library_profile", own, said2)
    else:
        problems.append("library_profile: no trace")

    cleared = os.path.join(scratch, "clearenv.json")
    rc, said3 = run([main_exe, "clearenv", plugin, cleared], {})
    if rc != 0:
        problems.append(f"clearenv: exit status {rc}")
    if os.path.exists(cleared):
        problems += check_trace("clearenv", cleared, said3)
    else:
        problems.append("clearenv: no trace")

    for p in problems:
        print("FAIL", p)
    if problems:
        print("--- autostart output\n" + said + "--- library_profile output\n" + said2 + "--- clearenv output\n" + said3)
        return 1
    print("ok: one session, one trace, every copy's scope (autostart, a library's own profile, and that with the "
          "environment cleared before the plugin is opened)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Run the README's shell session as written: readme-session.py README.md WORKDIR

The fenced ```sh blocks of the sections "A session" and "Files, streamed
output, background processes" are run in order by one bash in
WORKDIR, with the environment the README itself uses: SBX_LISTEN (the
daemon's HOST:PORT) and SBX_STATE_DIR holding dev-account.json (given
SANDBOXD_KEY instead, a dev-account.json with it is written in WORKDIR). In a block written as a terminal ("$ " before each
command) the lines after a command are its output as shown; in a block
without prompts every line is a command; a ```json block right after a
block is the output of its last command. Each shown output that is JSON is
compared with the real reply: the same fields (recursively, values aside,
and the keys of maps such as by_size aside; a ``jq .`` reply included).
A command shown without output must not answer an API error. A command
that exits non-zero stops the run.
A ``PID`` placeholder is the pid of the process started just before it.
Prints each command and exits non-zero on the first difference. Run by
tests/integration/test_contract.c (docs/api.md, "How the description is
checked")."""
import json
import os
import re
import subprocess
import sys

SECTIONS = ("A session", "Files, streamed output, background processes")


def blocks(text):
    """[(lang, lines)] of the fenced blocks in SECTIONS, in order."""
    out, section, fence = [], None, None
    for line in text.splitlines():
        if fence is None and line.startswith("## "):
            section = line[3:].strip()
            continue
        if line.startswith("```"):
            if fence is None:
                fence = (line[3:].strip(), [])
            else:
                if section in SECTIONS:
                    out.append(fence)
                fence = None
            continue
        if fence is not None:
            fence[1].append(line)
    return out


def steps(bl):
    """[(command, shown output or None)]: joined continuation lines."""
    result = []
    for i, (lang, lines) in enumerate(bl):
        if lang != "sh":
            continue
        prompt = any(l.startswith("$ ") for l in lines)
        cur = []
        for line in lines:
            if prompt and not line.startswith("$ "):
                if result and line.strip():
                    cmd, shown = result[-1]
                    result[-1] = (cmd, (shown + "\n" if shown else "") + line)
                continue
            line = line[2:] if prompt else line
            cur.append(line)
            if line.endswith("\\"):
                continue
            cmd = "\n".join(cur).strip()
            cur = []
            if cmd and not cmd.startswith("#"):
                result.append((cmd, None))
        if i + 1 < len(bl) and bl[i + 1][0] == "json" and result and result[-1][1] is None:
            result[-1] = (result[-1][0], "\n".join(bl[i + 1][1]))
    return result


def shape(v):
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    return type(v).__name__ if v is not None else None


MAPS = ("by_size", "pool")  # keyed by names of the deployment's config


def same_fields(shown, real, where=""):
    """Differences in field names between two JSON values."""
    diffs = []
    if where.rsplit(".", 1)[-1] in MAPS:
        return diffs
    if isinstance(shown, dict) and isinstance(real, dict):
        for k in sorted(set(shown) | set(real)):
            if k not in real:
                diffs.append("%s.%s shown, not in the reply" % (where, k))
            elif k not in shown:
                diffs.append("%s.%s in the reply, not shown" % (where, k))
            else:
                diffs += same_fields(shown[k], real[k], "%s.%s" % (where, k))
    return diffs


def main():
    readme, work = sys.argv[1:3]
    with open(readme, encoding="utf-8") as f:
        todo = steps(blocks(f.read()))
    if not todo:
        sys.exit("readme-session: no shell session found in " + readme)
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    if env.get("SANDBOXD_KEY") and not env.get("SBX_STATE_DIR"):
        env["SBX_STATE_DIR"] = os.path.abspath(work)
        with open(os.path.join(work, "dev-account.json"), "w") as f:
            json.dump({"api_key": env.pop("SANDBOXD_KEY")}, f)
    with open(os.path.join(work, "data.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    sh = subprocess.Popen(["bash", "--norc", "--noprofile"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, cwd=work, env=env, text=True)
    pid = None
    for n, (cmd, shown) in enumerate(todo):
        if pid:
            cmd = re.sub(r"\bPID\b", pid, cmd)
        mark = "__sbx_step_%d__" % n
        print("readme$ " + cmd, flush=True)
        sh.stdin.write("%s\necho; echo %s $?\n" % (cmd, mark))
        sh.stdin.flush()
        out = []
        for line in sh.stdout:
            if line.startswith(mark):
                rc = int(line.split()[1])
                break
            out.append(line)
        else:
            sys.exit("readme-session: the shell ended at: " + cmd)
        real = "".join(out).strip()
        print(real[:2000], flush=True)
        if rc != 0:
            sys.exit("readme-session: exit status %d: %s" % (rc, cmd))
        try:
            got = json.loads(real) if real else None
        except ValueError:
            got = None
        if got is None and real.startswith("{"):  # a stream: its last event
            try:
                got = json.loads(real.splitlines()[-1])
            except ValueError:
                pass
        if isinstance(got, dict) and got.get("object") == "process":
            pid = str(got["pid"])
        if shown is None:
            if isinstance(got, dict) and "error" in got:
                sys.exit("readme-session: an error where the README shows none: " + cmd)
            continue
        try:
            want = json.loads(shown)
        except ValueError:
            continue  # not JSON: shown as an illustration
        if got is None:
            sys.exit("readme-session: the README shows JSON, the reply is not: " + cmd)
        diffs = same_fields(want, got)
        if diffs:
            sys.exit("readme-session: the reply differs from the README's:\n  " + "\n  ".join(diffs))
    sh.stdin.close()
    sh.wait()
    print("readme-session: %d commands ran as the README shows them" % len(todo))


main()

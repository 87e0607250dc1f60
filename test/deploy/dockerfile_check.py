#!/usr/bin/env python3
"""Static checks of deploy/docker/Dockerfile (no daemon, no network).

    dockerfile_check.py DOCKERFILE CONTEXT_DIR

Parses the Dockerfile the way the builder does (parser directives, comments,
line continuations, JSON or shell form) and checks: every instruction is a
known one; stages are named before `--from` uses them; the first stage is
debian:12 and runs deploy/setup.sh, then builds the hetflow target; every
COPY from the context names files that exist and that the .dockerignore does
not exclude; the final stage's ENTRYPOINT is exec-form ["hetflow"]. Prints
every problem and exits 1 if there is one. With --print-run N prints the Nth
RUN's command (0-based) and exits.
"""
import fnmatch
import json
import os
import sys

KNOWN = {"FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT",
         "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def parse(path):
    """-> list of (line number, INSTRUCTION, argument text)."""
    lines = open(path).read().split("\n")
    out, i, directives = [], 0, True
    while i < len(lines):
        raw = lines[i]
        s = raw.strip()
        if directives and s.startswith("#") and "=" in s and s[1:].split("=")[0].strip().isidentifier():
            i += 1
            continue
        if not s or s.startswith("#"):
            if s and not s.startswith("#"):
                directives = False
            i += 1
            continue
        directives = False
        start, text = i + 1, ""
        while True:
            cur = lines[i].rstrip()
            if cur.strip().startswith("#") and text:  # comment lines inside a continuation
                i += 1
                continue
            if cur.endswith("\\"):
                text += cur[:-1] + " "
                i += 1
                if i >= len(lines):
                    raise SystemExit(f"{path}:{start}: line continuation runs past the end of the file")
                continue
            text += cur
            i += 1
            break
        word, _, rest = text.strip().partition(" ")
        out.append((start, word.upper(), rest.strip()))
    return out


def flags(arg):
    """--from=x --chown=y src... dest -> ({from: x, ...}, [words])"""
    fl, words = {}, []
    for w in arg.split():
        if w.startswith("--") and not words:
            k, _, v = w[2:].partition("=")
            fl[k] = v
        else:
            words.append(w)
    return fl, words


def ignored(rel, patterns):
    rel = rel.strip("/")
    hit = False
    for p in patterns:
        neg = p.startswith("!")
        p = p[1:] if neg else p
        p = p.strip("/")
        parts = rel.split("/")
        # A pattern excludes the path or any of its parents.
        for k in range(1, len(parts) + 1):
            prefix = "/".join(parts[:k])
            if fnmatch.fnmatchcase(prefix, p) or (p.startswith("**/") and fnmatch.fnmatchcase(prefix.split("/")[-1], p[3:])):
                hit = not neg
                break
    return hit


def main():
    args = sys.argv[1:]
    if args[0] == "--print-run":
        n = int(args[1])
        runs = [a for _, w, a in parse(args[2]) if w == "RUN"]
        print(runs[n])
        return 0
    dockerfile, context = args
    problems = []
    ins = parse(dockerfile)
    ignore_file = dockerfile + ".dockerignore"
    if not os.path.exists(ignore_file):
        ignore_file = os.path.join(context, ".dockerignore")
    patterns = []
    if os.path.exists(ignore_file):
        patterns = [l.strip() for l in open(ignore_file) if l.strip() and not l.strip().startswith("#")]

    stages, cur = [], None
    for line, word, arg in ins:
        where = f"{dockerfile}:{line}"
        if word not in KNOWN:
            problems.append(f"{where}: unknown instruction {word}")
            continue
        if word == "FROM":
            fl, w = flags(arg)
            name = w[2] if len(w) == 3 and w[1].upper() == "AS" else None
            if not (len(w) == 1 or (len(w) == 3 and w[1].upper() == "AS")):
                problems.append(f"{where}: FROM wants IMAGE [AS NAME]: {arg}")
            cur = {"image": w[0] if w else "", "name": name, "runs": [], "entry": None, "copies": []}
            stages.append(cur)
            continue
        if cur is None and word != "ARG":
            problems.append(f"{where}: {word} before the first FROM")
            continue
        if word == "RUN":
            cur["runs"].append(arg)
        elif word in ("COPY", "ADD"):
            fl, w = flags(arg)
            if w and w[0].startswith("["):
                w = json.loads(arg[arg.index("["):])
            if len(w) < 2:
                problems.append(f"{where}: {word} needs a source and a destination")
                continue
            if "from" in fl:
                names = [s["name"] for s in stages[:-1]]
                if fl["from"] not in names and not fl["from"].isdigit():
                    problems.append(f"{where}: --from={fl['from']} names no earlier stage ({names})")
            else:
                for src in w[:-1]:
                    rel = os.path.normpath(src).lstrip("/")
                    if rel == ".":
                        continue
                    if not os.path.exists(os.path.join(context, rel)):
                        problems.append(f"{where}: COPY source {src!r} does not exist in the context {context}")
                    elif ignored(rel, patterns):
                        problems.append(f"{where}: COPY source {src!r} is excluded by {ignore_file}")
            cur["copies"].append((fl, w))
        elif word in ("ENTRYPOINT", "CMD"):
            if arg.startswith("["):
                try:
                    v = json.loads(arg)
                    assert isinstance(v, list) and all(isinstance(x, str) for x in v)
                except Exception:
                    problems.append(f"{where}: {word} is not a valid JSON array of strings: {arg}")
                    continue
            else:
                v = None
            if word == "ENTRYPOINT":
                cur["entry"] = v

    if not stages:
        problems.append("no FROM")
    else:
        first, last = stages[0], stages[-1]
        if first["image"] not in ("debian:12", "debian:bookworm"):
            problems.append(f"the build stage starts from {first['image']!r}, want debian:12")
        if not last["image"].startswith(("debian:12", "debian:bookworm")):
            problems.append(f"the final stage starts from {last['image']!r}, want Debian 12")
        if not any("deploy/setup.sh" in r for r in first["runs"]):
            problems.append("the build stage does not run deploy/setup.sh")
        if not any("cmake --build" in r and "hetflow" in r for r in first["runs"]):
            problems.append("the build stage does not build the hetflow target")
        if last["entry"] != ["hetflow"]:
            problems.append(f"the final ENTRYPOINT is {last['entry']!r}, want exec form [\"hetflow\"]")
        if not any(fl.get("from") and any("hetflow" in x for x in w[:-1]) for fl, w in last["copies"]):
            problems.append("the final stage copies no hetflow binary from the build stage")
        if len(stages) > 1 and not any("apt-get install" in r for r in last["runs"]):
            problems.append("the final stage installs no runtime libraries")
    # What the build needs from the context must survive the .dockerignore.
    for need in ("CMakeLists.txt", "deploy/setup.sh", "actors", "apps", "schemas", "kernels", "topology", "cmake"):
        if ignored(need, patterns):
            problems.append(f"{ignore_file} excludes {need}, which the build needs")
        if not os.path.exists(os.path.join(context, need)):
            problems.append(f"the context has no {need}")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"ok: {len(ins)} instructions, {len(stages)} stages, ignore file {os.path.basename(ignore_file)}")
    return 0


sys.exit(main())

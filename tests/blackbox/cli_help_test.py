#!/usr/bin/python3
"""Every verb's --help documents every flag it accepts, each with its default.

Usage: cli_help_test.py DENDRO

The verbs come from `dendro --help` (printed from the CLI's verb table) and
each verb's accepted flags from `dendro completion bash` (generated from the
same table), so a flag added to the table without a help line, or a help
line without "(default: ...)" or "(required...)", fails here. A flag entry
is a help line starting with two spaces and "--"; the lines under it that
are indented further continue it.
"""
import re
import subprocess
import sys

FLAG_ENTRY = re.compile(r"^  (--[a-z][a-z0-9-]*)(?=\s|$)")
DEFAULT = re.compile(r"\(default: [^)]|\(required")


def run(dendro, *args):
    p = subprocess.run([dendro, *args], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError(f"dendro {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p.stdout


def verbs_from_main_help(text):
    """The verb names listed under "verbs:" (e.g. "l2h", "jobs list")."""
    verbs, inside = [], False
    for line in text.splitlines():
        if line == "verbs:":
            inside = True
            continue
        if inside:
            if not line.strip():
                break
            # "  NAME<spaces>summary": NAME is one or two words.
            m = re.match(r"^  ([a-z0-9-]+(?: [a-z0-9-]+)?)\s{2,}\S", line)
            if m is None:  # a one-space gap after a long name
                m = re.match(r"^  ([a-z0-9-]+(?: [a-z0-9-]+)?) ", line)
            verbs.append(m.group(1))
    return verbs


def flags_from_completion(text):
    """{verb: set of flags} and the global flags, from the bash completion."""
    per_verb = {}
    for m in re.finditer(r'^\s+"([a-z0-9 -]+)"\) flags="([^"]*)" ;;$', text, re.M):
        per_verb[m.group(1)] = set(m.group(2).split()) - {"--help"}
    g = re.search(r'local globals="([^"]*)"', text)
    globals_ = set(g.group(1).split()) - {"--help", "--version"}
    return per_verb, globals_


def flag_entries(help_text):
    """[(flag, full entry text)] for every flag entry of a --help text."""
    entries, current = [], None
    for line in help_text.splitlines():
        m = FLAG_ENTRY.match(line)
        if m:
            current = [m.group(1), line]
            entries.append(current)
        elif current is not None and line.startswith("   "):
            current[1] += "\n" + line
        else:
            current = None
    return [(flag, text) for flag, text in entries]


def main():
    dendro = sys.argv[1]
    verbs = verbs_from_main_help(run(dendro, "--help"))
    per_verb, global_flags = flags_from_completion(run(dendro, "completion", "bash"))
    failures = []
    if sorted(verbs) != sorted(per_verb):
        failures.append(f"'dendro --help' lists {sorted(verbs)} but the completion script "
                        f"has {sorted(per_verb)}")
    assert len(verbs) >= 20, verbs  # the table, not a parsing accident
    if "completion bash" not in run(dendro, "--help"):
        failures.append("'dendro --help' does not mention 'dendro completion bash'")
    assert global_flags >= {"--server", "--timeout", "--api-key-file"}, global_flags
    checked = 0
    for verb in verbs:
        text = run(dendro, *verb.split(), "--help")
        if not text.startswith(f"usage: dendro {verb}"):
            failures.append(f"{verb}: --help does not start with its usage: {text[:60]!r}")
        entries = flag_entries(text)
        documented = {flag for flag, _ in entries}
        for flag, entry in entries:
            checked += 1
            if not DEFAULT.search(" ".join(entry.split())):
                failures.append(f"{verb}: no default (nor 'required') for {flag}:\n{entry}")
            if flag not in per_verb.get(verb, set()) | global_flags:
                failures.append(f"{verb}: --help documents {flag}, which it does not accept")
        for flag in sorted(per_verb.get(verb, set()) | global_flags):
            if flag not in documented:
                failures.append(f"{verb}: accepts {flag} but --help has no line for it")
    # A flag the verb accepts is one it parses: an unknown one is a usage error.
    p = subprocess.run([dendro, "tree", "m", "--no-such-flag"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 2:
        failures.append(f"an unknown flag exited {p.returncode}, not 2")
    if failures:
        print("\n".join(failures))
        return 1
    print(f"ok: {len(verbs)} verbs, {checked} flag entries, each with a default or required")
    return 0


if __name__ == "__main__":
    sys.exit(main())

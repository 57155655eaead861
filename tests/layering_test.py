#!/usr/bin/env python3
"""The include rules of the source tree, checked on every #include.

- core/ includes nothing of server/, client/ or proto/, and no gRPC or
  protobuf header;
- every folder of server/ has a README.md whose "May include:" paragraph
  names the server/ folders its files may include (its own always may);
  server.{h,cc} and main.cc, the wiring, may include any of them;
- server/ holds no other file of its own.

Usage: layering_test.py [SOURCE_ROOT]   (default: this checkout)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), '..'))
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]', re.M)
WIRING = {'server.h', 'server.cc', 'main.cc', 'CMakeLists.txt'}


def sources(top):
    for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
        for name in names:
            if name.endswith(('.h', '.cc')):
                path = os.path.join(dirpath, name)
                yield os.path.relpath(path, ROOT), open(path, encoding='utf-8').read()


def allowed_folders(readme_path):
    text = open(readme_path, encoding='utf-8').read()
    at = text.find('May include:')
    if at < 0:
        return None
    paragraph = text[at:].split('\n\n')[0]
    return set(re.findall(r'`server/([a-z_]+)/`', paragraph))


def main():
    problems = []
    checked = 0
    for path, text in sources('core'):
        for inc in INCLUDE.findall(text):
            checked += 1
            if inc.split('/')[0] in ('server', 'client', 'proto') or \
                    inc.startswith(('grpc', 'google/protobuf')):
                problems.append(f'{path}: core/ includes {inc}')

    server = os.path.join(ROOT, 'server')
    folders = sorted(d for d in os.listdir(server) if os.path.isdir(os.path.join(server, d)))
    rules = {}
    for folder in folders:
        readme = os.path.join(server, folder, 'README.md')
        if not os.path.isfile(readme):
            problems.append(f'server/{folder}/ has no README.md')
            continue
        allowed = allowed_folders(readme)
        if allowed is None:
            problems.append(f'server/{folder}/README.md has no "May include:" paragraph')
            continue
        unknown = allowed - set(folders)
        if unknown:
            problems.append(f'server/{folder}/README.md names no such folder: {sorted(unknown)}')
        rules[folder] = allowed | {folder}
    for name in sorted(os.listdir(server)):
        if os.path.isfile(os.path.join(server, name)) and name not in WIRING:
            problems.append(f'server/{name} belongs in one of the folders of server/')

    for path, text in sources('server'):
        parts = path.split(os.sep)
        if len(parts) < 3:  # the wiring at the top of server/
            continue
        folder = parts[1]
        if folder not in rules:
            continue
        for inc in INCLUDE.findall(text):
            checked += 1
            m = re.match(r'server/([a-z_]+)/', inc)
            if inc.startswith('server/') and not m:
                problems.append(f'{path}: includes the wiring ({inc})')
            elif m and m.group(1) not in rules[folder]:
                problems.append(f'{path}: includes {inc}, which server/{folder}/README.md '
                                f'does not allow')

    if checked < 100:
        problems.append(f'only {checked} includes found under {ROOT}: wrong root?')
    for p in problems:
        print(p)
    print(f'layering: {checked} includes in core/ and server/ checked, '
          f'{len(problems)} problem(s)')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

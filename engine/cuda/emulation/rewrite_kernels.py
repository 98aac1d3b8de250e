#!/usr/bin/env python3
"""Rewrites CUDA kernel sources into C++ for the host emulation of CUDA.

The build runs this on the project's .cu and .cuh files; the outputs (in
the build tree, .cu becoming .cc) compile as ordinary C++ against the
emulation's headers (engine/cuda/emulation/runtime.h). Three constructs are
rewritten, all else is copied as is:

  kernel<<<grid, block[, smem[, stream]]>>>(args)
      -> ::trainyard::cuda_emulation::Launch(
             {__FILE__, __LINE__, "kernel"},
             ::trainyard::cuda_emulation::Config(grid, block, ...),
             TRAINYARD_EMULATION_KERNEL(kernel), args)
     (kernel: a name, possibly qualified, possibly with template arguments;
     the launch may span lines)
  extern __shared__ [__align__(N)] T name[];
      -> T* name = ::trainyard::cuda_emulation::DynamicSharedArray<T>(N);
  __shared__ [__align__(N)] T name[D1]...;
      -> auto& name = ::trainyard::cuda_emulation::BlockShared<T[D1]...>(
             [] {}, N);
  #pragma unroll [N]: dropped (the host compiler does not know it).

Anything it cannot rewrite with certainty -- another form of launch or of
__shared__, a namespace-scope __shared__, inline PTX, __constant__ or
__managed__ memory, cooperative launches, or a #include of a .cuh that is
not being rewritten alongside -- stops it with "FILE:LINE: error: ..." and
exit status 1, so a kernel change breaks the build instead of silently
testing something else. Line numbers are kept (#line), so compiler messages
point into the original source.

Usage: rewrite_kernels.py --source-root DIR --output-dir DIR FILE...
(FILEs relative to the source root).
"""

import argparse
import os
import re
import sys

NS = '::trainyard::cuda_emulation::'

UNSUPPORTED = [
    (re.compile(r'\b(?:asm|__asm__)\b'), 'inline assembly (PTX)'),
    (re.compile(r'\b__constant__\b'), '__constant__ memory'),
    (re.compile(r'\b__managed__\b'), '__managed__ memory'),
    (re.compile(r'\bcudaLaunch(?:Cooperative)?Kernel\w*\b'),
     'launches through cudaLaunchKernel'),
    (re.compile(r'\bcooperative_groups\b'), 'cooperative groups'),
    (re.compile(r'\b__grid_constant__\b'), '__grid_constant__ parameters'),
]

IDENT = r'[A-Za-z_]\w*'
EXTERN_SHARED = re.compile(
    r'\bextern\s+__shared__\s+(?:__align__\s*\(\s*(\w+)\s*\)\s+)?'
    r'([A-Za-z_][\w\s:]*?)\s+(' + IDENT + r')\s*\[\s*\]\s*;')
SHARED = re.compile(r'\b__shared__\s+(?:__align__\s*\(\s*(\w+)\s*\)\s+)?'
                    r'([^;{}=]+?)\s*;')
PRAGMA_UNROLL = re.compile(r'^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*',
                           re.MULTILINE)
# Matched on the masked text, where a quoted name is blanked: the name is
# read back from the same span of the source.
INCLUDE_QUOTED = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]*)"',
                            re.MULTILINE)


class RewriteError(Exception):

    def __init__(self, path, text, pos, message):
        line = text.count('\n', 0, pos) + 1
        super().__init__(f'{path}:{line}: error: {message}')


def mask_source(text):
    """Blanks comments and the insides of string and character literals.

    The result has the same length and newlines, so positions found in it
    are positions in `text`, and no pattern matches inside a comment.
    """
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != '\n':
                out[k] = ' '

    while i < n:
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            if j < 0:
                raise ValueError((i, 'unterminated comment'))
            blank(i, j + 2)
            i = j + 2
        elif text[i] == 'R' and text.startswith('"', i + 1) and (
                i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                raise ValueError((i, 'malformed raw string literal'))
            end = text.find(')' + m.group(1) + '"', i)
            if end < 0:
                raise ValueError((i, 'unterminated raw string literal'))
            blank(i + 2, end + len(m.group(1)) + 1)
            i = end + len(m.group(1)) + 2
        elif text[i] in '"\'':
            if text[i] == "'" and i > 0 and text[i - 1].isalnum():
                i += 1  # a digit separator, as in 1'000
                continue
            quote, j = text[i], i + 1
            while j < n and text[j] != quote:
                if text[j] == '\n':
                    raise ValueError((i, 'unterminated literal'))
                j += 2 if text[j] == '\\' else 1
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return ''.join(out)


def namespace_scope_flags(masked):
    """For each position: whether it is at namespace scope (not in a body)."""
    flags = bytearray(len(masked))
    stack = []  # per open brace: whether it opens a namespace
    for i, c in enumerate(masked):
        if c == '{':
            before = masked[max(0, i - 200):i]
            stack.append(
                bool(
                    re.search(r'\bnamespace(?:\s+[\w:]+)?\s*$|'
                              r'\bextern\s*"\s*"\s*$', before)))
        elif c == '}' and stack:
            stack.pop()
        flags[i] = all(stack)
    return flags


def match_back(masked, end, open_c, close_c):
    """Start of the bracketed group ending at masked[end - 1] == close_c."""
    depth = 0
    for k in range(end - 1, -1, -1):
        c = masked[k]
        if c == close_c:
            depth += 1
        elif c == open_c:
            depth -= 1
            if depth == 0:
                return k
        elif c in ';{}':
            return -1
    return -1


def match_forward(masked, start, open_c, close_c):
    """One past the group opened at masked[start] == open_c, or -1."""
    depth = 0
    for k in range(start, len(masked)):
        c = masked[k]
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return k + 1
        elif c in ';{}' and open_c == '(':
            return -1
    return -1


def kernel_start(masked, pos):
    """Start of the kernel expression that ends just before `<<<` at pos.

    The expression is a name, possibly qualified (a::b, ::a), possibly with
    template arguments; -1 for anything else.
    """
    end = pos
    while end > 0 and masked[end - 1].isspace():
        end -= 1
    k = end
    if k > 0 and masked[k - 1] == '>':
        k = match_back(masked, k, '<', '>')
        if k < 0:
            return -1
    while True:
        ident_end = k
        while k > 0 and (masked[k - 1].isalnum() or masked[k - 1] == '_'):
            k -= 1
        if k == ident_end or masked[k].isdigit():
            return -1
        if masked[max(0, k - 2):k] != '::':
            break
        k -= 2
        if k == 0 or not (masked[k - 1].isalnum() or masked[k - 1] == '_'):
            break  # a leading ::
    before = masked[:k].rstrip()
    if before.endswith('.') or before.endswith('->'):
        return -1  # a member: not a form we rewrite
    return k


def rewrite_launch(path, text, masked, pos):
    """(start, end, replacement) for the launch whose `<<<` is at pos."""
    start = kernel_start(masked, pos)
    if start < 0:
        raise RewriteError(
            path, text, pos, 'a launch whose kernel is not a (qualified, '
            'possibly templated) name')
    close = masked.find('>>>', pos + 3)
    stop = masked.find(';', pos + 3)
    if close < 0 or (0 <= stop < close):
        raise RewriteError(path, text, pos, 'a launch without a closing >>>')
    k = close + 3
    while k < len(masked) and masked[k].isspace():
        k += 1
    if k >= len(masked) or masked[k] != '(':
        raise RewriteError(path, text, pos,
                           'a launch not followed by its argument list')
    args_end = match_forward(masked, k, '(', ')')
    if args_end < 0:
        raise RewriteError(path, text, pos,
                           'a launch whose argument list does not close')
    kernel = ' '.join(text[start:pos].split())
    config = text[pos + 3:close]
    args = text[k + 1:args_end - 1]
    if not config.strip():
        raise RewriteError(path, text, pos, 'a launch without a configuration')
    label = kernel.replace('\\', '\\\\').replace('"', '\\"')
    replacement = (f'{NS}Launch({{__FILE__, __LINE__, "{label}"}}, '
                   f'{NS}Config({config}), '
                   f'TRAINYARD_EMULATION_KERNEL({kernel})' +
                   (f', {args}' if args.strip() else '') + ')')
    lost = text.count('\n', start, args_end) - replacement.count('\n')
    return start, args_end, replacement + '\n' * max(lost, 0)


def rewrite_shared(path, text, masked, m, at_namespace_scope):
    """(start, end, replacement) for one static __shared__ declaration."""
    if at_namespace_scope:
        raise RewriteError(
            path, text, m.start(), 'a __shared__ variable at namespace '
            'scope (declare it inside the kernel)')
    if re.search(r'\b(?:static|extern)\s*$', masked[:m.start()]):
        raise RewriteError(path, text, m.start(),
                           'a static or extern __shared__ declaration of a '
                           'form not rewritten')
    align, decl = m.group(1), text[m.start(2):m.end(2)]
    dims_at = decl.find('[')
    head = decl if dims_at < 0 else decl[:dims_at]
    dims = '' if dims_at < 0 else decl[dims_at:]
    nm = re.search(r'(' + IDENT + r')\s*$', head)
    type_text = head[:nm.start()].strip() if nm else ''
    if (not nm or not type_text or ',' in type_text or
            not re.fullmatch(r'[\w\s:<>*&]+', type_text) or
            not re.fullmatch(r'(?:\s*\[[^\[\]]+\])*\s*', dims)):
        raise RewriteError(path, text, m.start(),
                           'a __shared__ declaration of a form not rewritten '
                           '(one variable, no initializer)')
    type_id = ' '.join((type_text + ' ' + dims.strip()).split())
    extra = f', {align}' if align else ''
    replacement = (f'auto& {nm.group(1)} = {NS}BlockShared<{type_id}>'
                   f'([] {{}}{extra});')
    lost = text.count('\n', m.start(), m.end()) - replacement.count('\n')
    return m.start(), m.end(), replacement + '\n' * max(lost, 0)


def rewrite(text, path, rewritten_headers):
    """The emulation source for `text` (the contents of `path`)."""
    try:
        masked = mask_source(text)
    except ValueError as e:
        pos, what = e.args[0]
        raise RewriteError(path, text, pos, what) from None
    for pattern, what in UNSUPPORTED:
        m = pattern.search(masked)
        if m:
            raise RewriteError(path, text, m.start(),
                               f'{what} cannot be emulated')
    for m in INCLUDE_QUOTED.finditer(masked):
        inc = text[m.start(1):m.end(1)]
        if inc.endswith('.cuh') and inc not in rewritten_headers:
            raise RewriteError(
                path, text, m.start(), f'includes {inc}, which is not '
                'rewritten for the emulation (add it to the list in '
                'engine/cuda/emulation/CMakeLists.txt)')
    edits = []
    for m in EXTERN_SHARED.finditer(masked):
        align = m.group(1) or f'alignof({m.group(2).strip()})'
        type_text = ' '.join(text[m.start(2):m.end(2)].split())
        edits.append((m.start(), m.end(),
                      f'{type_text}* {m.group(3)} = '
                      f'{NS}DynamicSharedArray<{type_text}>({align});'))
    taken = [(a, b) for a, b, _ in edits]
    scope = namespace_scope_flags(masked)
    for m in re.finditer(r'\b__shared__\b', masked):
        if any(a <= m.start() < b for a, b in taken):
            continue
        decl = SHARED.match(masked, m.start())
        if not decl:
            raise RewriteError(path, text, m.start(),
                               'a __shared__ declaration of a form not '
                               'rewritten (one variable, no initializer)')
        edits.append(rewrite_shared(path, text, masked, decl, scope[m.start()]))
    for m in re.finditer(r'<<<', masked):
        edits.append(rewrite_launch(path, text, masked, m.start()))
    for m in PRAGMA_UNROLL.finditer(masked):
        edits.append((m.start(), m.end(), ''))
    edits.sort()
    for (a0, b0, _), (a1, _, _) in zip(edits, edits[1:]):
        if a1 < b0:
            raise RewriteError(path, text, a1, 'overlapping constructs')
    out, last = [], 0
    for a, b, new in edits:
        out.append(text[last:a])
        out.append(new)
        last = b
    out.append(text[last:])
    return ''.join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--source-root', required=True)
    parser.add_argument('--output-dir', required=True)
    parser.add_argument('files', nargs='+')
    opts = parser.parse_args(argv)
    headers = {f for f in opts.files if f.endswith('.cuh')}
    for rel in opts.files:
        src = os.path.join(opts.source_root, rel)
        if not rel.endswith(('.cu', '.cuh')):
            print(f'{src}: error: not a .cu or .cuh file', file=sys.stderr)
            return 1
        try:
            with open(src, encoding='utf-8') as f:
                text = f.read()
            body = rewrite(text, src, headers)
        except RewriteError as e:
            print(e, file=sys.stderr)
            return 1
        except OSError as e:
            print(f'{src}: error: {e.strerror}', file=sys.stderr)
            return 1
        out_rel = rel[:-3] + '.cc' if rel.endswith('.cu') else rel
        dst = os.path.join(opts.output_dir, out_rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        header = (f'// Generated from {rel} by '
                  'engine/cuda/emulation/rewrite_kernels.py for the host '
                  'emulation of CUDA; do not edit.\n'
                  '#include <cuda_runtime.h>\n'
                  f'#line 1 "{os.path.abspath(src)}"\n')
        tmp = f'{dst}.{os.getpid()}.tmp'
        with open(tmp, 'w', encoding='utf-8') as f:
            f.write(header + body)
        os.replace(tmp, dst)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Tests of rewrite_kernels.py: the forms it rewrites, and that it stops,
naming file and line, on every form it does not."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rewrite_kernels  # noqa: E402

NS = '::trainyard::cuda_emulation::'


def rewrite(text, headers=()):
    return rewrite_kernels.rewrite(text, 'k.cu', set(headers))


class LaunchTest(unittest.TestCase):

    def test_four_config_arguments(self):
        out = rewrite('void f() { K<<<g, b, 0, s>>>(x, y); }')
        self.assertIn(
            f'{NS}Launch({{__FILE__, __LINE__, "K"}}, {NS}Config(g, b, 0, s), '
            'TRAINYARD_EMULATION_KERNEL(K), x, y);', out)

    def test_two_and_three_config_arguments_and_no_kernel_arguments(self):
        out = rewrite('void f() { K<<<g, b>>>(); L<<<g, b, n>>>(p); }')
        self.assertIn(f'{NS}Config(g, b), TRAINYARD_EMULATION_KERNEL(K))', out)
        self.assertIn(f'{NS}Config(g, b, n), TRAINYARD_EMULATION_KERNEL(L), p)',
                      out)

    def test_templated_qualified_launch_over_several_lines(self):
        text = ('void f() {\n'
                '  ns::Kernel<T, kD, Other<int, 2>>\n'
                '      <<<dim3(a, b), kThreads,\n'
                '         0, stream>>>(out,\n'
                '                      static_cast<int>(n));\n'
                '  after();\n'
                '}\n')
        out = rewrite(text)
        self.assertIn(
            'TRAINYARD_EMULATION_KERNEL(ns::Kernel<T, kD, Other<int, 2>>), out,',
            out)
        self.assertIn(f'{NS}Config(dim3(a, b), kThreads,\n         0, stream)',
                      out)
        # Lines keep their numbers: `after()` stays on line 6.
        self.assertEqual(out.split('\n')[5], '  after();')
        self.assertEqual(out.count('\n'), text.count('\n'))

    def test_launches_in_comments_and_strings_are_left_alone(self):
        text = ('// K<<<1, 2>>>(x);\n/* L<<<1, 2>>>(x); */\n'
                'const char* s = "M<<<1, 2>>>(x)";\n')
        self.assertEqual(rewrite(text), text)

    def test_kernels_it_cannot_name_are_refused(self):
        for text in ('void f() { obj.k<<<1, 2>>>(x); }',
                     'void f() { p->k<<<1, 2>>>(x); }',
                     'void f() { (*fp)<<<1, 2>>>(x); }',
                     'void f() { K<<<1, 2>>>; }',
                     'void f() { K<<<1, 2; }',
                     'void f() { K<<<>>>(x); }'):
            with self.subTest(text=text):
                with self.assertRaisesRegex(rewrite_kernels.RewriteError,
                                            r'^k\.cu:1: error: '):
                    rewrite(text)


class SharedMemoryTest(unittest.TestCase):

    def test_static_shared_variables(self):
        out = rewrite('template <int N> __global__ void K() {\n'
                      '  __shared__ float lanes[2][N][N + 1];\n'
                      '  __shared__ int listed;\n'
                      '  __shared__ __align__(16) unsigned char raw[64];\n'
                      '}\n')
        self.assertIn(
            f'auto& lanes = {NS}BlockShared<float [2][N][N + 1]>([] {{}});',
            out)
        self.assertIn(f'auto& listed = {NS}BlockShared<int>([] {{}});', out)
        self.assertIn(
            f'auto& raw = {NS}BlockShared<unsigned char [64]>([] {{}}, 16);',
            out)

    def test_dynamic_shared_memory(self):
        out = rewrite('__global__ void K() {\n'
                      '  extern __shared__ __align__(128) unsigned char smem[];\n'
                      '  extern __shared__ float more[];\n'
                      '}\n')
        self.assertIn(
            f'unsigned char* smem = {NS}DynamicSharedArray<unsigned char>(128);',
            out)
        self.assertIn(
            f'float* more = {NS}DynamicSharedArray<float>(alignof(float));',
            out)

    def test_forms_it_does_not_rewrite_are_refused(self):
        cases = {
            '__shared__ float g[32];\n': 'namespace scope',
            'namespace a {\n__shared__ float g[32];\n}\n': 'namespace scope',
            'void K() {\n  __shared__ int x = 0;\n}\n': 'form not rewritten',
            'void K() {\n  __shared__ int x, y;\n}\n': 'form not rewritten',
            'void K() {\n  static __shared__ int x;\n}\n': 'static or extern',
            'void K() {\n  extern __shared__ float4 b[] __align__(16);\n}\n':
                'static or extern',
        }
        for text, why in cases.items():
            with self.subTest(text=text):
                line = text.count('\n', 0, text.index('__shared__')) + 1
                with self.assertRaisesRegex(rewrite_kernels.RewriteError,
                                            f'^k\\.cu:{line}: error: .*{why}'):
                    rewrite(text)


class OtherConstructsTest(unittest.TestCase):

    def test_pragma_unroll_is_dropped_keeping_lines(self):
        text = 'void f() {\n#pragma unroll\n  for (;;) {}\n#pragma unroll 4\n}\n'
        out = rewrite(text)
        self.assertNotIn('pragma', out)
        self.assertEqual(out.count('\n'), text.count('\n'))

    def test_constructs_that_cannot_be_emulated_are_refused(self):
        for text, why in (('asm("trap;");', 'inline assembly'),
                          ('__constant__ float c[4];', '__constant__'),
                          ('__managed__ int m;', '__managed__'),
                          ('cudaLaunchKernel(f, g, b, a, 0, s);',
                           'cudaLaunchKernel'),
                          ('/* never closed', 'unterminated comment')):
            with self.subTest(text=text):
                with self.assertRaisesRegex(rewrite_kernels.RewriteError, why):
                    rewrite('\n' + text)

    def test_included_headers_must_be_rewritten_too(self):
        text = '#include "engine/cuda/block_reduce.cuh"\n'
        self.assertEqual(rewrite(text, ['engine/cuda/block_reduce.cuh']), text)
        with self.assertRaisesRegex(rewrite_kernels.RewriteError,
                                    'block_reduce.cuh, which is not rewritten'):
            rewrite(text)


class MainTest(unittest.TestCase):

    def test_writes_outputs_with_line_directives(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, 'src'))
            with open(os.path.join(root, 'src', 'a.cu'), 'w') as f:
                f.write('void f() { K<<<1, 2>>>(x); }\n')
            out_dir = os.path.join(root, 'out')
            self.assertEqual(
                rewrite_kernels.main(
                    ['--source-root', root, '--output-dir', out_dir,
                     'src/a.cu']), 0)
            with open(os.path.join(out_dir, 'src', 'a.cc')) as f:
                out = f.read()
            self.assertIn('#include <cuda_runtime.h>\n#line 1 "', out)
            self.assertIn(f'{NS}Launch(', out)

    def test_fails_with_status_1_naming_file_and_line(self):
        with tempfile.TemporaryDirectory() as root:
            with open(os.path.join(root, 'b.cu'), 'w') as f:
                f.write('void f() {\n\n  obj.k<<<1, 2>>>(x);\n}\n')
            err = io.StringIO()
            with redirect_stderr(err):
                status = rewrite_kernels.main(
                    ['--source-root', root, '--output-dir', root, 'b.cu'])
            self.assertEqual(status, 1)
            self.assertRegex(err.getvalue(), r'b\.cu:3: error: a launch')
            self.assertFalse(os.path.exists(os.path.join(root, 'b.cc')))


if __name__ == '__main__':
    unittest.main()

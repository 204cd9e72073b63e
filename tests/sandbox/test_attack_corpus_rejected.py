"""The attack corpus's REJECTED table: hostile hooks that `check_patch` refuses with a stable
violation code (format strings and dunder walks, frame walks, imports, sockets, files, exec,
fork and signals, loops and recursion, exception handlers that could swallow a limit, poisoning
of shared objects, literal bombs and size limits). Most of them are ALSO run directly in the
isolated worker (which accepts any code: static checks are the caller's job) to show that what
the filter catches is contained a second time at run time."""

from __future__ import annotations

import pytest
from attack_corpus_rig import BIG, OK, SHORT, WALK, Host, Rejected, Run, contain, hook, patch_of

from harness_r1.sandbox.static import check_patch

REJECTED: list[Rejected] = [
    # -- format strings and dunder walks -------------------------------------------------------
    Rejected(
        "format_field_reads_dunder",
        hook("return '{0.__class__}'.format(ctx)"),
        "banned_attribute",
        Run(OK, "<class 'dict'>"),
    ),
    Rejected(
        "format_map_walks_the_mro",
        hook("return '{a.__class__.__mro__}'.format_map({'a': ctx})"),
        "banned_attribute",
        Run(OK, "<class 'object'>"),
    ),
    Rejected(
        "format_reaches_function_globals",
        hook("return '{0.__globals__[re]}'.format(similarity)"),
        "banned_attribute",
        Run(OK, "<module 're'"),  # only a string crosses the pipe
    ),
    Rejected(
        "unbound_str_format",
        hook("f = str.format\nreturn f('{0.__class__}', ctx)"),
        "banned_attribute",
        Run(OK, "<class 'dict'>"),
    ),
    Rejected("fstring_dunder", hook("return f'{ctx.__class__.__mro__}'"), "private_attribute"),
    Rejected(
        "match_class_pattern_reads_dunder",
        hook("match ctx:\n    case dict(__class__=c):\n        return repr(c)\nreturn None"),
        "private_attribute",
        Run(OK, "<class 'dict'>"),
    ),
    Rejected(
        "subclasses_walk_to_os_system",
        hook(
            """\
            for c in ().__class__.__bases__[0].__subclasses__():
                if c.__name__ == '_wrap_close':
                    return c.__init__.__globals__['system']('touch ' + ctx['dir'] + '/pwned')
            return None
            """
        ),
        "private_attribute",
        Run(OK, "32512"),  # glibc: the shell could not be spawned (clone denied), status 127
    ),
    Rejected(
        "function_globals_builtins_by_subscript",
        hook("return similarity.__globals__['__builtins__']['open'](ctx['path'], 'w')"),
        "private_attribute",
        Run("violation", "[Errno 13]"),  # the real open(); Landlock denies the write
    ),
    Rejected(
        "builtins_by_subscript",
        hook("return __builtins__['open'](ctx['path'], 'w')"),
        "banned_name",
        Run("raised", "KeyError: 'open'"),
    ),
    Rejected(
        "getattr_with_split_name",
        hook("return getattr(ctx, '__cl' + 'ass__')"),
        "banned_name",
        Run("raised", "NameError"),
    ),
    Rejected("ctx_class", hook("return ctx.__class__"), "private_attribute", Run("junk", "type")),
    Rejected(
        "code_object_of_a_helper",
        hook("return closest.__code__"),
        "private_attribute",
        Run("junk", "code is not JSON serializable"),
    ),
    Rejected(
        "code_constants_without_underscores",
        hook("return list(closest.co_consts)"),
        "banned_attribute",
        Run("raised", "AttributeError"),
    ),
    # -- generator, coroutine and traceback frames ---------------------------------------------
    Rejected(
        "generator_frame_walk_kills_the_parent",
        hook(WALK + "return os.kill(os.getppid(), 9)"),
        "banned_attribute",
        Run("violation", "[Errno 1]"),  # seccomp: signals only to itself
    ),
    Rejected(
        "generator_frame_walk_to_real_builtins",
        hook(
            "g = (g.gi_frame.f_back.f_back.f_builtins for x in [1])\n"
            "return next(g)['open'](ctx['path'], 'w').write('pwned')"
        ),
        "banned_attribute",
        Run("violation", "[Errno 13]"),
    ),
    Rejected(
        "traceback_frame_of_a_caught_exception",
        hook(
            """\
            try:
                ctx['missing']
            except KeyError as e:
                f = e.__traceback__.tb_frame.f_back
                return f.f_globals['os'].unlink(ctx['path'])
            return None
            """
        ),
        "private_attribute",
        Run("violation", "[Errno 13]"),
    ),
    Rejected(
        "tb_frame_on_the_exception_itself",
        hook("try:\n    ctx['missing']\nexcept KeyError as e:\n    return e.tb_frame\nreturn None"),
        "banned_attribute",
        Run("raised", "AttributeError"),
    ),
    Rejected(
        "coroutine_frame",
        hook("return repr(c().cr_frame.f_back)", "async def c():\n    return 1\n"),
        "banned_attribute",
        Run(OK, "None"),  # a fresh coroutine's frame has no caller to walk to
    ),
    # -- reaching os, sys, builtins; sockets, files, exec, fork, signals -----------------------
    Rejected(
        "import_in_hook",
        hook("import os\nreturn os.getcwd()"),
        "banned_import",
        Run("raised", "__import__ not found"),
    ),
    Rejected(
        "import_at_top_level",
        "import os\n" + hook("return os.getcwd()"),
        "banned_import",
        Run("raised", "__import__ not found"),
    ),
    Rejected(
        "dunder_import",
        hook("return __import__('os').system('id')"),
        "banned_name",
        Run("raised", "NameError"),
    ),
    Rejected(
        "re_module_walk_to_sys",
        hook("return re.enum.sys.modules['os'].getpid()"),
        "unknown_module_attribute",
        Run("raised", "has no attribute 'enum'"),  # `re` is a namespace, not the module
    ),
    Rejected(
        "math_loader",
        hook("return math.__loader__.load_module('os')"),
        "private_attribute",
        Run("raised", "has no attribute '__loader__'"),
    ),
    Rejected(
        "helper_globals_to_os_fork",
        hook("os = similarity.__globals__['re'].enum.sys.modules['os']\nreturn os.fork()"),
        "private_attribute",
        Run("violation", "[Errno 1]"),  # seccomp: clone denied
    ),
    Rejected(
        "raw_socket_syscall_through_ctypes",
        hook(
            WALK + "ct = sys.modules['ctypes']\nlibc = ct.CDLL(None, use_errno=True)\n"
            "return [libc.socket(2, 1, 0), ct.get_errno()]"
        ),
        "banned_attribute",
        Run(OK, "[-1, 1]"),  # socket(AF_INET, SOCK_STREAM) = -1, errno EPERM
    ),
    Rejected(
        "exec_a_shell",
        hook(WALK + "return os.execv('/bin/sh', ['sh', '-c', 'touch ' + ctx['dir'] + '/pwned'])"),
        "banned_attribute",
        Run("violation", "[Errno 1]"),
    ),
    Rejected(
        "truncate_a_world_writable_file",
        hook(
            WALK + "fd = os.open(ctx['path'], os.O_WRONLY | os.O_TRUNC)\nreturn os.write(fd, b'x')"
        ),
        "banned_attribute",
        Run("violation", "[Errno 13]"),
    ),
    # -- reads (issue 18): Landlock handles reads too and grants none --------------------------
    Rejected(
        "read_a_file_outside_the_sandbox",
        hook(WALK + "return os.read(os.open(ctx['path'], os.O_RDONLY), 100)"),
        "banned_attribute",
        Run("violation", "[Errno 13]"),
    ),
    Rejected(
        "read_the_daemons_environ",
        hook(WALK + "return os.read(os.open(f'/proc/{os.getppid()}/environ', 0), 4096)"),
        "banned_attribute",
        Run("violation", "[Errno 13]"),
    ),
    Rejected(
        "read_the_daemons_cmdline",
        hook(WALK + "return os.read(os.open(f'/proc/{os.getppid()}/cmdline', 0), 4096)"),
        "banned_attribute",
        Run("violation", "[Errno 13]"),
    ),
    Rejected(
        "list_the_project_tree",
        hook(WALK + "return os.listdir(ctx['dir'])"),
        "banned_attribute",
        Run("violation", "[Errno 13]"),
    ),
    Rejected(
        "create_a_file",
        hook(WALK + "return os.open(ctx['dir'] + '/new', os.O_WRONLY | os.O_CREAT)"),
        "banned_attribute",
        Run("violation", "[Errno 13]"),
    ),
    Rejected(
        "signal_the_whole_process_group",
        hook(WALK + "return os.killpg(os.getpgrp(), 9)"),
        "banned_attribute",
        Run("violation", "[Errno 1]"),
    ),
    Rejected(
        "signal_every_process",
        hook(WALK + "return os.kill(-1, 9)"),
        "banned_attribute",
        Run("violation", "[Errno 1]"),
    ),
    Rejected(
        "leave_the_process_group",
        hook(WALK + "return os.setsid()"),
        "banned_attribute",
        Run("violation", "[Errno 1]"),
    ),
    Rejected(
        "kill_itself",
        hook(WALK + "return os.kill(os.getpid(), 9)"),
        "banned_attribute",
        Run("crashed", "SIGKILL"),
    ),
    Rejected(
        "segfault_through_ctypes",
        hook(WALK + "return sys.modules['ctypes'].string_at(0)"),
        "banned_attribute",
        Run("crashed", "SIGSEGV"),
    ),
    Rejected(
        "close_the_protocol_pipes",
        hook(WALK + "os.closerange(3, 64)\nreturn 'silent'"),
        "banned_attribute",
        Run("crashed", "closed its pipe"),
    ),
    Rejected(
        "lift_the_memory_limit",
        hook(WALK + "r = sys.modules['resource']\nreturn r.setrlimit(r.RLIMIT_AS, (-1, -1))"),
        "banned_attribute",
        Run("raised", "not allowed to raise maximum limit"),
    ),
    Rejected(
        "open_for_writing",
        hook("return open(ctx['path'], 'w')"),
        "banned_name",
        Run("raised", "NameError"),
    ),
    Rejected(
        "exec_a_string",
        hook("return exec('import os')"),
        "banned_name",
        Run("raised", "NameError"),
    ),
    Rejected("eval_a_string", hook("return eval('1 + 1')"), "banned_name"),
    # -- loops, recursion, exceptions that could swallow a limit -------------------------------
    Rejected(
        "while_true",
        hook("while True:\n    pass"),
        "banned_while",
        Run("timeout", "no response within the budget", SHORT),
    ),
    Rejected(
        "iter_with_sentinel",
        hook("for x in iter(int, 1):\n    pass\nreturn None"),
        "banned_name",
        Run("raised", "NameError"),
    ),
    Rejected(
        "lambda_self_application",
        hook("f = lambda f: f(f)\nreturn f(f)"),
        "banned_lambda",
        Run("raised", "RecursionError"),
    ),
    Rejected(
        "class_with_finaliser",
        hook("return A()", "class A:\n    def __del__(self):\n        pass\n"),
        "banned_class",
    ),
    Rejected(
        "raise_system_exit",
        hook("raise SystemExit(0)"),
        "banned_raise",
        Run("raised", "NameError"),  # SystemExit is not in a hook's builtins
    ),
    Rejected(
        "rebind_a_scope_global",
        hook("global similarity\nsimilarity = None\nreturn 1"),
        "banned_global",
        Run(OK, "1"),  # the rebinding dies with the call's globals: the fingerprint proves it
    ),
    Rejected(
        "generator_hook",
        hook("yield {'effect': 'force', 'text': 'open door'}"),
        "banned_yield",
        Run("junk", "generator"),
    ),
    Rejected(
        "bare_except_turns_recursion_into_a_loop",
        hook(
            "return f(0)",
            "def f(n):\n    try:\n        return f(n + 1)\n    except:\n        return f(n + 1)\n",
        ),
        "bare_except",
        Run("timeout", "no response within the budget", SHORT),
    ),
    Rejected(
        "finally_turns_recursion_into_a_loop",
        hook(
            "return f(0)",
            "def f(n):\n    try:\n        return f(n + 1)\n    finally:\n        f(n)\n",
        ),
        "banned_finally",
        Run("timeout", "no response within the budget", SHORT),
    ),
    Rejected(
        "except_memory_error",
        hook(BIG + "try:\n    x = 'a' * n\nexcept MemoryError:\n    return 'caught'\nreturn x"),
        "except_type",
        Run("raised", "name 'MemoryError' is not defined"),
    ),
    Rejected(
        "except_recursion_error_and_retry",
        hook(
            "return f(0)",
            "def f(n):\n    try:\n        return f(n + 1)\n"
            "    except RecursionError:\n        return f(n + 1)\n",
        ),
        "except_type",
        Run("raised", "name 'RecursionError' is not defined"),
    ),
    Rejected(
        "except_base_exception_in_a_loop",
        hook(
            BIG + "for i in range(1000):\n    try:\n        x = [0] * n\n"
            "    except BaseException:\n        pass\nreturn 'survived'"
        ),
        "except_type",
        Run("raised", "name 'BaseException' is not defined"),
    ),
    # -- poisoning shared objects for later calls ----------------------------------------------
    Rejected(
        "assign_math_pi",
        hook("math.pi = 3\nreturn math.pi"),
        "attribute_assignment",
        Run("raised", "hook namespaces are read-only"),
    ),
    Rejected(
        "replace_re_sub",
        hook("re.sub = similarity\nreturn None"),
        "attribute_assignment",
        Run("raised", "hook namespaces are read-only"),
    ),
    Rejected(
        "delete_math_pi",
        hook("del math.pi\nreturn None"),
        "attribute_assignment",
        Run("raised", "hook namespaces are read-only"),
    ),
    Rejected(
        "namespace_dict_write",
        hook("re.__dict__['escape'] = re.sub\nreturn None"),
        "private_attribute",  # at run time too: see test_attack_corpus.py's regression tests
    ),
    Rejected(
        "helper_defaults_write",
        hook("closest.__defaults__ = (2.0,)\nreturn None"),
        "private_attribute",
    ),
    # -- literal bombs and size limits ---------------------------------------------------------
    Rejected(
        "literal_string_bomb",
        hook("return len('a' * 10**10)"),
        "literal_bomb",
        Run("memory", "MemoryError"),
    ),
    Rejected(
        "literal_list_bomb",
        hook("return len([0] * 10**9)"),
        "literal_bomb",
        Run("memory", "MemoryError"),
    ),
    Rejected(
        "literal_huge_range",
        hook("for i in range(10**12):\n    pass\nreturn None"),
        "literal_bomb",
        Run("timeout", "no response within the budget", SHORT),
    ),
    Rejected(
        "literal_power_tower",
        hook("return 9 ** 9 ** 9 > 0"),
        "literal_bomb",
        Run("timeout", "no response within the budget", SHORT),
    ),
    Rejected(
        "literal_power_at_the_limit",
        hook("return 10 ** 9 > 0"),
        "literal_bomb",
    ),
    Rejected(
        "big_int_power",
        hook(BIG + "return (2 ** n) > 0"),
        "computed_exponent",
        Run("timeout", "no response within the budget", SHORT),
    ),
    Rejected(
        "computed_exponent_on_a_float",
        hook("x = len(ctx['observation'])\nreturn (1.5 ** x) > 0"),
        "computed_exponent",
    ),
    Rejected(
        "math_prod_of_a_huge_range",
        hook(BIG + "return math.prod(range(1, n)) > 0"),
        "unknown_module_attribute",
        Run("raised", "has no attribute 'prod'"),  # left out of the math namespace
    ),
    Rejected(
        "math_lcm_of_a_huge_range",
        hook(BIG + "return math.lcm(*range(1, n)) > 0"),
        "unknown_module_attribute",
        Run("raised", "has no attribute 'lcm'"),
    ),
    Rejected(
        "top_level_memory_bomb",
        "X = [0] * int('1' + '0' * 10)\n" + hook("return len(X)"),
        "top_level_statement",
        Run("memory", "MemoryError"),  # module code runs on every call, inside the limits
    ),
    Rejected("no_hook_function", "hook = len\n", "missing_hook", Run("invalid", "def hook")),
    Rejected("oversized_literal", hook("return '" + "x" * 3000 + "'"), "string_too_long"),
    Rejected(
        "oversized_source",
        hook("x = 0\n" + "x = x + 1\n" * 1000 + "return x"),
        "source_too_long",
    ),
]


@pytest.mark.parametrize("case", REJECTED, ids=[c.name for c in REJECTED])
def test_rejected_statically_with_its_code(case: Rejected) -> None:
    report = check_patch(patch_of(case.code))
    assert not report.ok
    assert case.violation in report.codes(), report.codes()


RUN_REJECTED = [c for c in REJECTED if c.run is not None]


@pytest.mark.parametrize("case", RUN_REJECTED, ids=[c.name for c in RUN_REJECTED])
def test_rejected_hooks_are_also_contained_at_run_time(case: Rejected, host: Host) -> None:
    assert case.run is not None
    contain(case.code, case.run, host)

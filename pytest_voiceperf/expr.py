"""Safe evaluation of the untrusted ``metric`` and ``when`` expressions of claim files.

An expression is checked statically at collection time (:func:`check`) against a
small grammar: numbers, strings, arithmetic, comparisons, ``and``/``or``/``not``,
``a if c else b``, calls of whitelisted math functions, names that are params, and
``alias.output`` where ``alias`` is a measure alias and ``output`` one of the
outputs its probe declares. No other attribute access, subscript, lambda,
comprehension or import can pass. Evaluation then goes through ``simpleeval``
(which keeps its own limits on power and string sizes), never ``eval``.
"""
from __future__ import annotations

import ast
import math
import statistics
from collections.abc import Mapping
from typing import Any

import simpleeval

MAX_EXPR_CHARS = 500
MAX_NODES = 200

FUNCTIONS: dict[str, Any] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "sqrt": math.sqrt,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "exp": math.exp,
    "floor": math.floor,
    "ceil": math.ceil,
    "median": lambda *xs: statistics.median(xs),
    "mean": lambda *xs: statistics.fmean(xs),
    "float": float,
}
CONSTANTS: dict[str, Any] = {"pi": math.pi, "e": math.e, "inf": math.inf, "true": True, "false": False}

_ALLOWED = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call,
    ast.Name, ast.Load, ast.Constant, ast.Attribute, ast.Tuple,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Not,
    ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn,
)


class ExprError(ValueError):
    pass


def check(text: Any, *, names: set[str], aliases: Mapping[str, set[str]] | None = None, what: str = "expression") -> ast.Expression:
    """Validate ``text``; return its AST. Raises :class:`ExprError` with a fix."""
    aliases = aliases or {}
    if not isinstance(text, str):
        raise ExprError(f"the {what} must be a string expression, not {type(text).__name__}")
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"the {what} is {len(text)} characters long; at most {MAX_EXPR_CHARS} are allowed")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"the {what} {text!r} is not a valid expression ({exc.msg})") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ExprError(f"the {what} is too complex ({len(nodes)} parts, at most {MAX_NODES})")
    for node in nodes:
        if not isinstance(node, _ALLOWED):
            raise ExprError(f"the {what} {text!r} uses {type(node).__name__}, which is not allowed; "
                            "use arithmetic, comparisons, params, alias.output and math functions only")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool)):
            raise ExprError(f"the {what} {text!r} holds a constant of type {type(node.value).__name__}")
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and abs(node.value) > 10**30:
            raise ExprError(f"the {what} {text!r} holds a number too large")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                fn = ast.unparse(node.func)
                raise ExprError(f"the {what} {text!r} calls {fn!r}; only {', '.join(sorted(FUNCTIONS))} may be called")
        if isinstance(node, ast.Attribute):
            if not isinstance(node.value, ast.Name) or node.value.id not in aliases:
                raise ExprError(f"the {what} {text!r} uses attribute access {ast.unparse(node)!r}; "
                                f"only alias.output is allowed, with an alias from 'measure' ({', '.join(sorted(aliases)) or 'none'})")
            outputs = aliases[node.value.id]
            if node.attr not in outputs:
                raise ExprError(f"the {what} {text!r} reads {node.value.id}.{node.attr}, but that probe's outputs are "
                                f"{', '.join(sorted(outputs))}")
        if isinstance(node, ast.Name):
            parent_ok = node.id in names or node.id in FUNCTIONS or node.id in CONSTANTS or node.id in aliases
            if not parent_ok:
                raise ExprError(f"the {what} {text!r} uses the unknown name {node.id!r}; known names: "
                                f"{', '.join(sorted(set(names) | set(aliases))) or 'none'}")
    compare_operands = {id(c) for n in nodes if isinstance(n, ast.Compare) for c in [n.left, *n.comparators]}
    # a tuple compared as a whole (model in ('a', 'b')) compares each of its items
    compare_operands |= {id(e) for n in nodes if isinstance(n, ast.Tuple) and id(n) in compare_operands for e in n.elts}
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in compare_operands:
            raise ExprError(f"the {what} {text!r} uses a string outside a comparison; strings may only be compared "
                            "with params (model == 'qwen3-0.6b')")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exp = node.right
            if isinstance(exp, ast.UnaryOp) and isinstance(exp.op, (ast.USub, ast.UAdd)):
                exp = exp.operand
            if not (isinstance(exp, ast.Constant) and isinstance(exp.value, (int, float))
                    and not isinstance(exp.value, bool) and abs(exp.value) <= 16):
                raise ExprError(f"the {what} {text!r} raises to a power that is not a small constant (|p| <= 16)")
    # a bare alias (without .output) is not a number
    for node in nodes:
        if isinstance(node, ast.Name) and node.id in aliases:
            if not any(isinstance(p, ast.Attribute) and p.value is node for p in nodes):
                raise ExprError(f"the {what} {text!r} uses the alias {node.id!r} alone; write {node.id}.<output>")
    return tree


def references(text: str) -> set[tuple[str, str]]:
    """The ``alias.output`` pairs an expression (accepted by :func:`check`) reads."""
    tree = ast.parse(text.strip(), mode="eval")
    return {(n.value.id, n.attr) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}


class _Outputs:
    """Attribute view of one probe's outputs (only declared names are reachable)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name.startswith("_") or name not in values:
            raise AttributeError(f"the probe did not report {name!r}")
        return values[name]


def _number(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"arithmetic needs numbers, not the {type(x).__name__} {str(x)[:40]!r}")
    return float(x)


def _arith(op):
    # arithmetic is done on floats: a power of a power (((9**16)**16)**16...) overflows at once
    # instead of building an integer of billions of digits, and a param string times a number
    # ('qwen3-0.6b' * 10**16) is an error instead of a MemoryError at collection
    return lambda a, b: op(_number(a), _number(b))


_OPERATORS = {ast.Add: _arith(lambda a, b: a + b), ast.Sub: _arith(lambda a, b: a - b),
              ast.Mult: _arith(lambda a, b: a * b), ast.Div: _arith(lambda a, b: a / b),
              ast.FloorDiv: _arith(lambda a, b: a // b), ast.Mod: _arith(lambda a, b: a % b),
              ast.Pow: _arith(lambda a, b: a ** b),
              ast.USub: lambda a: -_number(a), ast.UAdd: lambda a: +_number(a)}


def evaluate(text: str, names: Mapping[str, Any], outputs: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """Evaluate an expression already accepted by :func:`check`."""
    env = dict(CONSTANTS)
    env.update(names)
    for alias, values in (outputs or {}).items():
        env[alias] = _Outputs(values)
    ev = simpleeval.SimpleEval(names=env, functions=FUNCTIONS)
    ev.operators = {**ev.operators, **_OPERATORS}
    # check() accepts tuples; simpleeval's plain evaluator has no node for them
    ev.nodes[ast.Tuple] = lambda node: tuple(ev._eval(e) for e in node.elts)
    try:
        return ev.eval(text.strip())
    except ZeroDivisionError:
        raise ExprError(f"{text!r} divided by zero") from None
    except (simpleeval.InvalidExpression, AttributeError, TypeError, ValueError, OverflowError, ArithmeticError,
            MemoryError, RecursionError) as exc:
        raise ExprError(f"{text!r} could not be evaluated: {type(exc).__name__}: {exc}") from None

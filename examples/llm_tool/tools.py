"""Tools an LLM agent may call. Each runs in the sandbox described by ``.pysb.yaml``.

``evaluate_expression`` contains a bug on purpose: when its safe evaluator does not know an
expression it falls back to ``eval`` without builtins -- a shortcut that a prompt-injected
model can escape. The point of the example is that the sandbox holds anyway.
"""

import ast
import http.client
import math
import operator
import urllib.parse

from pysb_core import sandbox

MAX_BYTES = 64 * 1024

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_FUNCTIONS = {"sqrt": math.sqrt, "log": math.log, "abs": abs, "round": round}


class NotArithmetic(ValueError):
    """The expression uses something the safe evaluator does not know."""


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        if isinstance(node.op, ast.Pow) and abs(_evaluate(node.right)) > 1000:
            raise NotArithmetic("exponent too large")
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_evaluate(a) for a in node.args))
    raise NotArithmetic(ast.dump(node)[:80])


@sandbox(timeout=10)
def fetch_url(url: str) -> str:
    """Fetch an http:// URL and return the start of its body as text."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http:// URLs are supported, not {url!r}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=5)
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", target)
        return conn.getresponse().read(MAX_BYTES).decode("utf-8", "replace")
    finally:
        conn.close()


@sandbox(timeout=5)
def evaluate_expression(expression: str) -> float:
    """Evaluate an arithmetic expression for the model."""
    if len(expression) > 4000:
        raise ValueError("expression too long")
    try:
        return _evaluate(ast.parse(expression, mode="eval").body)
    except NotArithmetic:
        # THE BUG (on purpose): a "convenient" fallback. eval() without builtins is not a
        # sandbox -- the expression can climb back to every builtin through __subclasses__.
        return eval(expression, {"__builtins__": {}}, {})

"""The CEL subset of the API double: values as CEL gives them, errors as CEL treats them."""

from typing import Any

import pytest

from pyhami.testing.fake_apiserver.cel import (
    CelEvaluationError,
    CelUnsupportedError,
    compile_expression,
)

REQUEST = {
    "operation": "UPDATE",
    "userInfo": {"username": "system:serviceaccount:hami:dp", "groups": ["a"]},
}


def run(source: str, request: dict[str, Any] | None = None) -> Any:
    variables = {
        "request": REQUEST if request is None else request,
        "object": {},
        "oldObject": None,
    }
    return compile_expression(source).evaluate(variables)


@pytest.mark.parametrize(
    "source, value",
    [
        ("request.operation == 'UPDATE'", True),
        ('request.operation != "UPDATE"', False),
        ("request.userInfo.username in ['x', \"system:serviceaccount:hami:dp\"]", True),
        ("request.userInfo.username.startsWith('system:serviceaccount:hami:')", True),
        ("request.userInfo.username.endsWith(':dp') && !true", False),
        ("request.userInfo.username.contains('hami') || false", True),
        ("!(request.operation == 'CREATE' || request.operation == 'DELETE')", True),
        ("'a\\u003cb' == \"a<b\"", True),
        ("'it\\'s' == \"it's\"", True),
        ("'x' in []", False),
    ],
)
def test_values(source: str, value: bool) -> None:
    assert run(source) is value


def test_or_and_and_are_commutative_about_errors() -> None:
    assert run("request.nope == 'x' || true") is True
    assert run("true || request.nope == 'x'") is True
    assert run("request.nope == 'x' && false") is False
    with pytest.raises(CelEvaluationError, match="no such key: nope"):
        run("request.nope == 'x' || false")
    with pytest.raises(CelEvaluationError, match="not a bool"):
        run("!request.operation")


@pytest.mark.parametrize(
    "source, words",
    [
        ("request.userInfo.groups.exists(g, g == 'a')", "unsupported function exists()"),
        ("size(request.userInfo.groups) > 0", "unsupported CEL"),
        ("request.operation == 'a' ||", "unexpected end"),
        ("authorizer.group('x')", "unsupported CEL 'authorizer'"),
        ("request.operation == 1", "unsupported CEL"),
    ],
)
def test_what_is_not_supported_is_refused_by_name(source: str, words: str) -> None:
    with pytest.raises(CelUnsupportedError, match=words.replace("(", r"\(").replace(")", r"\)")):
        compile_expression(source)

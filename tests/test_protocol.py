import pytest

from reachlens import Protocol, ProtocolMismatch
from reachlens.errors import ReachlensError
from reachlens.tasks import load_task


def test_hash_is_stable_and_field_sensitive():
    a = Protocol("arith", k=8)
    assert a.hash == Protocol("arith", k=8).hash
    assert len(a.hash) == 16
    assert a.hash != Protocol("arith", k=9).hash


def test_hash_is_pinned_across_processes():
    import subprocess
    import sys

    code = "from reachlens import Protocol; print(Protocol('arith', k=8).hash)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout.strip()
    assert out == Protocol("arith", k=8).hash


def test_round_trip_through_dict():
    p = Protocol("gsm8k", k=4, stop=("\n\n",), grader="numeric")
    assert Protocol.from_dict(p.to_dict()) == p


def test_diff_names_fields_and_require_match_refuses():
    a, b = Protocol("arith", k=8), Protocol("arith", k=16, temperature=1.0)
    assert a.diff(b) == {"k": (8, 16), "temperature": (0.8, 1.0)}
    with pytest.raises(ProtocolMismatch, match="k, temperature"):
        a.require_match(b)
    a.require_match(Protocol("arith", k=8))


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(k=0), "k=0 must be an integer >= 1"),
        (dict(temperature=-0.5), "temperature=-0.5 must be a finite number >= 0"),
        (dict(temperature=0.0, k=4), "greedy samples are all identical"),
        (dict(top_p=0.0), "top_p=0.0 must lie in"),
        (dict(max_new_tokens=0), "max_new_tokens=0"),
        (dict(stop=("",)), "empty string"),
    ],
)
def test_validation_names_the_bad_value(kw, msg):
    with pytest.raises(ReachlensError, match=msg.replace("(", "\\(")):
        Protocol("arith", **kw)


def test_resolved_fills_task_defaults_and_checks_format():
    task = load_task("arith", n=2)
    p = Protocol("arith").resolved(task)
    assert (p.prompt_format, p.stop, p.grader) == ("qa", ("\n",), "numeric")
    with pytest.raises(LookupError, match="no prompt format 'nope'"):
        Protocol("arith", prompt_format="nope").resolved(task)
    with pytest.raises(ReachlensError, match="protocol is for task 'gsm8k'"):
        Protocol("gsm8k").resolved(task)


def test_unknown_fields_in_a_stored_protocol_are_refused():
    with pytest.raises(ReachlensError, match="unknown protocol fields \\['kk'\\]"):
        Protocol.from_dict({"task": "arith", "kk": 3})

"""``module:qualified.name`` references, as a trace names a plugin policy's class and the benchmark registry its
tasks' functions."""

import pytest

from ccviz.engine.config import RunConfig
from ccviz.policies import POLICIES
from ccviz.references import import_ref, is_reference


def test_a_reference_has_a_module_and_a_name():
    assert is_reference("ccviz.policies:POLICIES")
    assert not any(is_reference(text) for text in ["ccviz.policies", ":POLICIES", "ccviz.policies:", ""])


def test_import_ref_follows_a_dotted_name_and_lets_failures_through():
    assert import_ref("ccviz.policies:POLICIES") is POLICIES
    assert import_ref("ccviz.engine.config:RunConfig.title") is RunConfig.title
    with pytest.raises(AttributeError):
        import_ref("ccviz.policies:NoSuchName")
    with pytest.raises(ModuleNotFoundError):
        import_ref("ccviz.no_such_module:Name")

"""The public API carries itself: generate takes a RunConfig, a policy need not be registered to run, and
plugins register through ccviz.register_policy, CCVIZ_PLUGINS or the ccviz.policies entry-point group."""

import inspect
from dataclasses import dataclass, fields

import pytest

import ccviz
from ccviz import CcvizError, Policy, RunConfig, Trace, generate, register_policy, run_generation
from ccviz.plugins import load_plugins
from ccviz.policies import POLICIES
from ccviz.policies.sliding import Sliding
from ccviz.policies.tova import Tova

PROMPT = "The harbour master logs every ship by name and tonnage, and keeps the ledger in a locked drawer. " * 3


@dataclass
class OwnTova(Tova):
    """Tova under another name, never registered: it runs all the same, and its trace names its class."""

    name = "own_tova"
    summary = "tova, kept in a user's module"


def _kept(trace: Trace) -> list[list[int]]:
    return [cycle.kept for cycle in trace.cycles]


# ----- generate(lm, prompt, config=None, **settings) ------------------------------------------------
def test_generate_takes_a_config_or_its_fields_and_settings_override_the_config(tiny):
    config = RunConfig(policy="tova", cache_size=12, chunk_size=4, chat=False, max_new_tokens=6)
    by_config = generate(tiny, PROMPT, config)
    by_keywords = generate(tiny, PROMPT, policy="tova", cache_size=12, chunk_size=4, chat=False, max_new_tokens=6)
    assert by_config.tokens == by_keywords.tokens and _kept(by_config) == _kept(by_keywords)
    shorter = generate(tiny, PROMPT, config, max_new_tokens=2)
    assert shorter.run_config == by_config.run_config.replace(max_new_tokens=2)
    assert shorter.tokens == by_config.tokens[: len(shorter.tokens)]
    # a new policy does not take the config's options
    other = generate(tiny, PROMPT, config, policy="snapkv", policy_options={"window": 3})
    assert other.run_config.policy == "snapkv" and other.run_config.options["window"] == 3


def test_generate_names_its_settings_and_refuses_others_in_one_line():
    with pytest.raises(CcvizError) as err:
        generate(None, PROMPT, policy="tova", cache_size=8, cache=8)
    message = str(err.value)
    assert "\n" not in message and "no setting 'cache'" in message
    assert all(f.name in message for f in fields(RunConfig))
    with pytest.raises(CcvizError, match="needs a config, or cache_size"):
        generate(None, PROMPT, policy="tova")
    with pytest.raises(CcvizError, match="config must be a RunConfig, got dict"):
        generate(None, PROMPT, {"policy": "tova", "cache_size": 8})
    shown = inspect.signature(generate).parameters  # help(generate) and editors see every keyword
    names = [f.name for f in fields(RunConfig)]
    assert [name for name in shown if name in names] == names
    assert shown["max_new_tokens"].default == 128 and shown["cache_size"].default is inspect.Parameter.empty


# ----- a policy that is not registered ------------------------------------------------------------
def test_an_unregistered_policy_runs_and_its_trace_reruns_from_its_recorded_class(tiny, tmp_path):
    assert "own_tova" not in POLICIES
    trace = generate(tiny, PROMPT, policy=OwnTova(), cache_size=12, chunk_size=4, chat=False, max_new_tokens=4)
    tova = generate(tiny, PROMPT, policy="tova", cache_size=12, chunk_size=4, chat=False, max_new_tokens=4)
    assert _kept(trace) == _kept(tova)
    assert trace.config["policy"] == "own_tova" and trace.config["policy_class"] == f"{__name__}:OwnTova"
    trace.save(tmp_path / "own.json")
    loaded = Trace.load(tmp_path / "own.json")
    assert isinstance(loaded.run_config.build_policy(), OwnTova)
    rerun = run_generation(tiny, PROMPT, loaded.run_config)
    assert rerun.tokens == trace.tokens and _kept(rerun) == _kept(trace)
    registered = generate(tiny, PROMPT, policy=Tova(), cache_size=12, chat=False, max_new_tokens=1)
    assert "policy_class" not in registered.config  # a registered class is named by its name alone


def test_a_policy_class_that_cannot_be_imported_still_runs_and_its_trace_says_what_is_missing(tiny):
    @dataclass
    class Local(Sliding):
        name = "local_sliding"
        summary = "a class defined in a function: nothing can import it"

    trace = generate(tiny, PROMPT, policy=Local(), cache_size=12, chat=False, max_new_tokens=2)
    assert trace.cycles and trace.run_config.describe() == "local_sliding"  # it describes itself without the class
    with pytest.raises(CcvizError, match=r"cannot import the policy class '.*Local' of policy 'local_sliding'") as err:
        run_generation(tiny, PROMPT, trace.run_config)
    assert "\n" not in str(err.value)


def test_a_run_is_described_once_for_every_place_that_names_it():
    config = RunConfig(
        policy="snapkv",
        cache_size=64,
        chunk_size=16,
        frozen=3,
        recent=0,
        policy_options={"window": 8},
        granularity="word",
        pool="mean",
        allocation="pyramid",
        pyramid_beta=4,
    )
    assert config.describe() == "snapkv (window=8) by word (mean), pyramid"
    assert config.describe_budget() == "J=64 · h=16 · frozen=3 · recent=0 · beta=4"
    plain = RunConfig(policy="tova", cache_size=8, granularity="token")
    assert plain.describe() == "tova" and plain.describe_budget() == "J=8 · h=default · frozen=auto · recent=default"


def test_an_old_trace_config_reads_with_the_defaults_of_the_fields_it_lacks():
    trace = Trace(config={"policy": "tova", "cache_size": 16, "chunk_size": 4, "model": "m"})
    run = trace.run_config
    assert run.allocation == "uniform" and run.pool == "max" and run.policy_class is None
    with pytest.raises(CcvizError, match="not a valid ccviz trace: config: cache size J must be a whole number"):
        Trace.from_dict({**Trace(config={"policy": "tova", "cache_size": "many"}).to_dict()})


# ----- register_policy ------------------------------------------------------------------------------
def test_register_policy_is_public_and_refuses_what_would_go_wrong_silently(registry):
    assert ccviz.register_policy is register_policy and "register_policy" in ccviz.__all__

    class NoDataclass(Sliding):  # its option would be silently dropped
        name = "no_dataclass"
        summary = "forgot @dataclass"
        width: int = 3

    @dataclass
    class NoSummary(Sliding):
        name = "no_summary"
        summary = ""

    @dataclass
    class NoSignal(Policy):
        name = "no_signal"
        summary = "evicts, but its scores would be recorded under None"

    @dataclass
    class Fine(Sliding):
        name = "fine_sliding"
        summary = "a sliding window by another name"

    refusals = [
        (NoDataclass, "'no_dataclass' must be a @dataclass"),
        (NoSummary, "'no_summary' needs a summary"),
        (NoSignal, "'no_signal' evicts, so it needs a signal"),
    ]
    for cls, message in refusals:
        with pytest.raises(CcvizError, match=message) as err:
            register_policy(cls)
        assert "\n" not in str(err.value) and cls.name not in registry
    assert register_policy(Fine) is Fine and registry["fine_sliding"] is Fine


# ----- the ccviz.policies entry-point group ---------------------------------------------------------
def _distribution(root, name: str, entry_points: str, module: str = "", source: str = "") -> None:
    """An installed distribution as importlib.metadata finds one: a dist-info folder on the import path."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[ccviz.policies]\n{entry_points}\n", encoding="utf-8")
    if module:
        (root / f"{module}.py").write_text(source, encoding="utf-8")


PLUGIN_SOURCE = """
from dataclasses import dataclass

from ccviz.policies.sliding import Sliding


@dataclass
class Installed(Sliding):
    name = "installed_sliding"
    summary = "a sliding window from an installed distribution"
"""


def test_an_installed_distribution_registers_its_policy_by_entry_point(tmp_path, monkeypatch, registry, tiny):
    _distribution(
        tmp_path,
        "ccviz_demo_plugin",
        "installed = ccviz_demo_plugin_policies:Installed",
        "ccviz_demo_plugin_policies",
        PLUGIN_SOURCE,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "installed_sliding" not in registry
    load_plugins(())
    assert registry["installed_sliding"].__module__ == "ccviz_demo_plugin_policies"
    trace = generate(tiny, PROMPT, policy="installed_sliding", cache_size=12, chat=False, max_new_tokens=2)
    assert trace.cycles and "policy_class" not in trace.config
    load_plugins(())  # loading again (the app does, on every page run) changes nothing
    assert registry["installed_sliding"].__module__ == "ccviz_demo_plugin_policies"


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path, monkeypatch, registry):
    _distribution(tmp_path, "ccviz_broken_plugin", "broken = ccviz_no_such_module:Thing")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(CcvizError) as err:
        load_plugins(())
    message = str(err.value)
    assert "\n" not in message
    where = "the plugin entry point 'broken' (ccviz_no_such_module:Thing) of the 'ccviz.policies' group"
    assert message.startswith(f"cannot load {where}")
    assert "ModuleNotFoundError" in message

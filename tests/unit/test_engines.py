"""The engine families' pure side: each built-in LLM family's spec function over an LLMCall, what a
family declares (packages, capabilities), and the packages a results file records."""
import pytest

from pytest_voiceperf import engines, provenance
from pytest_voiceperf.engines import llm_specs
from pytest_voiceperf.engines.llm_specs import LLMCall
from pytest_voiceperf.exceptions import Unmeasured
from pytest_voiceperf.provenance import packages_match


def _call(**kw) -> LLMCall:
    base = dict(model="qwen3-0.6b", config={"model_type": "qwen3"}, weights=None, device="cuda",
                dtype="bfloat16", quantization=None, prefix_cache=False, tp=1, engine_args={})
    return LLMCall(**{**base, **kw})


def test_vllm_spec_keeps_prefix_caching_on_and_the_options_in_the_spec():
    spec = llm_specs.vllm(_call(engine_args={"enforce_eager": True}, tp=2))
    assert spec == {"model": "qwen3-0.6b", "config": {"model_type": "qwen3"}, "weights": None, "device": "cuda",
                    "engine_args": {"enforce_eager": True}, "dtype": "bfloat16", "quantization": None,
                    "prefix_caching": True, "tensor_parallel_size": 2}
    # the same call gives the same spec (one shared engine instance)
    assert llm_specs.vllm(_call()) == llm_specs.vllm(_call())


def test_vllm_spec_refuses_gguf_formats_and_fp8_on_the_cpu():
    with pytest.raises(Unmeasured, match="vLLM runs quantization none or fp8 here, not 'q4_0'"):
        llm_specs.vllm(_call(quantization="q4_0"))
    with pytest.raises(Unmeasured, match="FP8 weights .* need a CUDA GPU"):
        llm_specs.vllm(_call(quantization="fp8", device="cpu"))
    assert llm_specs.vllm(_call(quantization="fp8"))["quantization"] == "fp8"


def test_transformers_and_llamacpp_refuse_what_they_cannot_run():
    with pytest.raises(Unmeasured, match="engine_args are vLLM options; this call runs on transformers"):
        llm_specs.transformers(_call(engine_args={"max_num_seqs": 8}))
    with pytest.raises(Unmeasured, match="unquantized weights only"):
        llm_specs.transformers(_call(quantization="fp8"))
    with pytest.raises(Unmeasured, match="no prefix cache"):
        llm_specs.transformers(_call(prefix_cache=True))
    assert llm_specs.llamacpp(_call())["quant"] == "f16"
    assert llm_specs.llamacpp(_call(quantization="q4_0"))["quant"] == "q4_0"


def test_each_builtin_llm_family_names_its_spec_function_and_capabilities():
    fams = engines.families()
    for name in engines.of_kind("llm"):
        mod, _, fn = fams[name].spec.partition(":")
        assert mod == "pytest_voiceperf.engines.llm_specs" and callable(getattr(llm_specs, fn)), name
    assert [n for n in engines.of_kind("llm") if fams[n].tensor_parallel] == ["vllm"]
    assert not fams["llamacpp"].batches and fams["vllm"].batches


def test_the_packages_recorded_and_matched_come_from_the_families():
    recorded = provenance.packages()
    assert recorded[0] == "torch" and recorded[-2:] == ["pytest", "numpy"]
    for fam in engines.families().values():
        assert set(fam.packages) <= set(recorded) and set(fam.packages) <= set(packages_match()), fam.name
    assert {"vllm", "nemo_toolkit", "voxcpm", "llama_cpp_python", "transformers"} <= set(packages_match())


def test_engine_auto_and_the_operators_options_follow_the_family_declarations(monkeypatch):
    from pytest_voiceperf import cmdline
    from pytest_voiceperf.engines import Family
    from pytest_voiceperf.probes import llm_call as llm

    toy = Family("toyllm", "toy_engine", (), "pip install toy", kind="llm", formats=("awq",), auto_rank=3,
                 engine_args=True)
    fams = dict(engines.families(), toyllm=toy)
    monkeypatch.setattr(engines.family, "_families", fams)
    monkeypatch.setattr(llm, "installed", lambda name: name in ("toyllm", "transformers"))
    assert llm.family_for("auto", "q4_0") == "llamacpp"  # llama.cpp's own format
    assert llm.family_for("auto", "awq") == "toyllm"  # the plugin's
    assert llm.family_for("auto", None, preferred="transformers") == "transformers"  # the operator's pick
    assert llm.family_for("auto") == "toyllm"  # ranked above vLLM and installed
    monkeypatch.setattr(llm, "installed", lambda name: name == "transformers")
    assert llm.family_for("auto") == "transformers"  # vLLM and the plugin not installed here
    monkeypatch.setattr(llm, "installed", lambda name: False)
    assert llm.family_for("auto") == "transformers"  # nothing installed: the fallback, which says so
    assert "awq" in llm.quants() and llm.quants()[:2] == ("none", "fp8")
    assert cmdline.engine_args(["toyllm:mib=64", "vllm:enforce_eager=true"]) == {
        "toyllm": {"mib": 64}, "vllm": {"enforce_eager": True}}
    with pytest.raises(pytest.UsageError, match="options are taken for the vllm, toyllm engine"):
        cmdline.engine_args(["transformers:foo=1"])

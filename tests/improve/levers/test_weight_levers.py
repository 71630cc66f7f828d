import json

from ratchet.core.agent import Agent
from ratchet.core.memory import to_exemplar
from ratchet.engine.models.base import Prompt
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.models.lora import to_example
from ratchet.engine.models.render import render_prompt
from ratchet.engine.rollout import rollout
from ratchet.envs.calc import env
from ratchet.improve.levers.rft import RftLever
from ratchet.improve.levers.weights import as_prompted


class CharTokenizer:
    eos_token = "\x03"

    def apply_chat_template(self, conversation, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<{m['role']}>{m['content']}\x03\n" for m in conversation)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def test_weight_levers_train_on_the_prompt_the_agent_runs_with_demonstrations_included():
    solved, task = env.tasks("train", 2, seed=4, difficulty=1)
    (demo_episode,) = rollout(env, [solved], Agent(version="oracle"), None)
    agent = Agent(model="fake", exemplars=(to_exemplar(demo_episode),), exemplars_per_task=1)
    prompts = []

    def reply(prompt, rng):
        prompts.append(prompt)
        return json.dumps({"name": "finish", "arguments": {"answer": "7"}})

    (episode,) = rollout(env, [task], agent, FakeModel(reply=reply))
    assert len(prompts[0].messages) > len(episode.messages) - 2  # the demonstration was shown
    (shown,) = as_prompted([episode], agent)
    tokenizer = CharTokenizer()
    seen = render_prompt(tokenizer, Prompt(prompts[0].messages, episode.tools), True)
    example = to_example(tokenizer, shown, max_tokens=10**6, failed=True)
    text = "".join(map(chr, example.input_ids))
    assert text.startswith(seen)  # trained on exactly the text the agent read
    pairs = zip(example.input_ids, example.assistant_masks, strict=True)
    targets = "".join(chr(i) for i, m in pairs if m)
    assert targets.count('"name": "finish"') == 1  # the demonstration's finish is no target
    assert as_prompted([episode], Agent(model="fake")) == [episode]


def test_rft_steps_grow_with_the_successes_between_its_bounds():
    lever = RftLever(steps=30, batch_size=4, epochs=3.0, max_steps=120)
    assert lever.steps_for(10) == 30  # 8 passes' worth is below the least it takes
    assert lever.steps_for(128) == 96  # three passes over 128 episodes, four a step
    assert lever.steps_for(1000) == 120
    assert RftLever(steps=30).steps_for(128) == 192  # six passes by default
    assert RftLever(steps=30).steps_for(1000) == 240
    assert RftLever(steps=30, epochs=0).steps_for(1000) == 30  # off: exactly its steps

import pytest

from forge.jars import jars
from ratchet.core.tool import Tool, ToolCall
from ratchet.engine.models.base import Completion
from ratchet.engine.models.fake import FakeModel
from ratchet.forge import ForgeConfig
from ratchet.forge.tasks import forge_tasks
from ratchet.forge.wording import check_templates, leaks, question, reword, sentence


def lend(book_id: str, member_id: str) -> str:
    """Lend an available book to a member.

    Args:
        book_id: The book.
        member_id: The member.
    """
    return "ok"


LEND = Tool.from_function(lend)
CALL = ToolCall("lend", {"book_id": "B07", "member_id": "M03"})


def test_sentences_come_from_templates_or_the_description():
    assert sentence({"lend": "Lend {book_id} to {member_id}."}, LEND, CALL) == "Lend B07 to M03."
    assert (
        sentence({}, LEND, CALL)
        == "Lend an available book to a member: book_id B07, member_id M03."
    )
    assert (
        question({}, LEND, CALL)
        == "What does lend return for book_id B07, member_id M03? Answer with finish."
    )


def test_templates_must_fit_their_tools():
    check_templates({"lend": "Lend {book_id} ({changes})."}, [LEND])
    with pytest.raises(ValueError, match="no such tool"):
        check_templates({"borrow": "x"}, [LEND])
    with pytest.raises(ValueError, match=r"uses \{title\}"):
        check_templates({"lend": "Lend {title}."}, [LEND])


def test_a_rewording_must_keep_the_values_and_name_nothing_hidden():
    template = "Lend book B07 to member M03. Then call finish."
    kept, hidden = ["B07", "M03"], {"B07", "M03", "B11", "on loan", "Hana"}
    assert leaks("Please lend B07 to M03, then finish.", template, kept, hidden) is None
    assert leaks("Please lend B07 to member M3.", template, kept, hidden) == "drops the value 'M03'"
    assert "names 'Hana'" in leaks("Lend B07 to M03 (that is Hana).", template, kept, hidden)
    assert "names 'B11'" in leaks("Lend B07 to M03, not B11.", template, kept, hidden)
    assert leaks("", template, kept, hidden) == "empty"


def test_reword_keeps_the_template_when_the_model_fails_or_leaks():
    replies = iter(["Please lend B07 to M03.", "Lend B07 to M03; it is on loan after.", ""])

    class Scripted(FakeModel):
        def complete(self, prompts, sampling):
            out = []
            for _ in prompts:
                text = next(replies)
                out.append(Completion(text, error=None if text else "server down"))
            return out

    asked = [("Lend book B07 to member M03.", ["B07", "M03"], {"on loan"})] * 3
    results = reword(Scripted(), asked)
    assert [r.text for r in results] == [
        "Please lend B07 to M03.",
        "Lend book B07 to member M03.",
        "Lend book B07 to member M03.",
    ]
    assert results[1].refused == "names 'on loan', which the task does not give"
    assert results[2].refused.startswith("the model failed")


def test_a_question_rewording_that_gives_the_answer_away_is_refused():
    def answer(prompt, rng):
        return prompt.messages[-1]["content"] + " (Hint: red, green, blue, full or empty.)"

    config = ForgeConfig(max_difficulty=1, tasks_per_level=20, question_share=1.0)
    pool, counts, _ = forge_tasks(jars, config, FakeModel(reply=answer))
    specs = [*pool.train, *pool.probe, *pool.test]
    assert counts.reworded == 0 and counts.refused["names"] == len(specs) > 0
    assert not any("Hint" in spec.instruction for spec in specs)

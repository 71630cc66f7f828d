import functools
import hashlib
import json
import random
import re

import pytest

from fakes import describe_task
from ratchet.core.task import Task, make_task
from ratchet.core.tool import Tool, ToolCall, ToolError
from ratchet.core.trajectory import Trajectory
from ratchet.engine.harness import replay
from ratchet.envs.check import check_env
from ratchet.envs.shop import env
from ratchet.envs.shop.db import DB_SEEDS, fresh_copy, store
from ratchet.envs.shop.schema import TABLES, Customer, Order
from ratchet.envs.shop.state import delta, fingerprint
from ratchet.envs.shop.tools import make_tools
from ratchet.envs.shop.world import World

SEED = 0


def finish(answer: str = "done") -> ToolCall:
    return ToolCall("finish", {"answer": answer})


def lookup(customer: Customer) -> ToolCall:
    return ToolCall("find_customer_by_email", {"email": customer.email})


def order_with(status: str, *, late: bool = False) -> tuple[Customer, Order]:
    shop = store(SEED)
    order = next(
        o
        for o in shop.orders.values()
        if o.status == status and (o.delivered_late or not late) and len(o.items) >= 1
    )
    return shop.customers[order.customer_id], order


def task_for(writes: list[dict], facts: list[dict] | None = None, customer: str = "") -> Task:
    """A hand-made task on store SEED, for exercising the verifier directly."""
    shop = store(SEED)
    order_id = next((w["arguments"].get("order_id") for w in writes), None)
    owner = customer or shop.orders[order_id].customer_id
    params = {"db_seed": SEED, "customer_id": owner, "writes": writes, "facts": facts or []}
    return Task("shop-test", "shop", "hand-made", "test", params=params)


def cancel(order: Order, reason: str = "no longer needed") -> ToolCall:
    return ToolCall("cancel_order", {"order_id": order.id, "reason": reason})


# --- the env as a whole ---------------------------------------------------------------------


def test_check_env_passes():
    report = check_env(env, n=60, split_draws=100)
    assert report.passed, [r for r in report.results if not r.passed]


def test_thousands_of_distinct_tasks_per_split():
    tasks = env.tasks("train", 2000)
    # A request drawn twice, once worded with the email and once with name and zip, is one
    # problem; the same words can ask the same question in two stores (two worlds).
    assert len({repr(sorted(t.params.items())) for t in tasks}) >= 1990
    assert len({t.instruction for t in tasks}) >= 1990


def test_difficulty_is_the_number_of_calls_of_the_shortest_plan_lookup_included():
    for level in range(1, 7):
        for task in env.tasks("train", 30, difficulty=level):
            plan = env.oracle(task)
            assert plan[0].name.startswith("find_customer") and plan[-1].name == "finish"
            assert len(plan) - 1 == level
            assert replay(env, task, plan).passed


def test_level_one_asks_for_the_customer_id_the_lookup_shows():
    for task in env.tasks("test", 30, difficulty=1):
        assert task.family == "identity" and task.instruction.endswith("What is my customer id?")
        lookup_call, _ = env.oracle(task)
        customer = task.params["customer_id"]
        assert replay(env, task, [lookup_call, finish(f"It is {customer}.")]).passed
        assert not replay(env, task, [finish(f"It is {customer}.")]).passed  # the lookup first
        assert not replay(env, task, [lookup_call, finish("done")]).passed
        other = next(c for c in store(task.params["db_seed"]).customers if c != customer)
        hedged = f"{customer} or {other}"
        assert not replay(env, task, [lookup_call, finish(hedged)]).passed
        assert not replay(env, task, [lookup_call, finish(customer + "1")]).passed


def test_level_two_is_one_read_or_one_spelled_out_write():
    kinds = set()
    for task in env.tasks("test", 60, difficulty=2):
        (_, action, _) = env.oracle(task)
        kinds.add(action.name)
        if "order_id" in action.arguments:
            assert action.arguments["order_id"] in task.instruction
    assert {"get_order", "cancel_order", "modify_customer_address"} <= kinds


def test_how_the_customer_identifies_is_wording_not_params():
    tasks = env.tasks("train", 200, difficulty=1)
    by_email = [t for t in tasks if "@" in t.instruction]
    assert 0 < len(by_email) < len(tasks)
    for task in tasks[:20]:
        assert "identify" not in task.params
        lookup_call = env.oracle(task)[0]
        spelled = next(iter(lookup_call.arguments.values()))
        assert spelled in task.instruction
        assert lookup_call.name == (
            "find_customer_by_email" if "@" in task.instruction else "find_customer_by_name_zip"
        )


def test_every_family_is_drawn():
    families = {t.family for t in env.tasks("train", 400)}
    expected = {"cancel", "address", "modify_items", "return", "exchange", "refund", "info"}
    assert expected | {"mixed", "identity"} == families


def test_store_generation_is_deterministic():
    rebuilt = store.__wrapped__(5)
    assert rebuilt.customers == store(5).customers
    assert rebuilt.orders == store(5).orders
    with pytest.raises(ValueError, match="db_seed must be in"):
        store(DB_SEEDS)


@pytest.mark.parametrize(
    ("db_seed", "digest"),
    [(0, "1779e7b78b0ee9e8"), (63, "d7009c1a4267cdb4")],
)
def test_the_tool_schemas_the_agent_sees_are_pinned(db_seed, digest):
    # A change here changes what every model is shown: on purpose, it bumps env.version.
    world = World.open(db_seed)
    schemas = json.dumps([Tool.from_function(fn).schema() for fn in make_tools(world)])
    world.close()
    assert hashlib.sha256(schemas.encode()).hexdigest()[:16] == digest


def test_reset_shows_the_policy_and_fourteen_tools():
    session = env.session(env.tasks("test", 1)[0])
    first = session.reset()
    session.close()
    assert "Policy:" in first.text and "Only pending orders" in first.text
    assert len(first.tools) == 15  # 14 shop tools and finish


# --- policy ---------------------------------------------------------------------------------


def test_changes_before_identity_are_refused_and_fail_the_task():
    customer, order = order_with("pending")
    task = task_for(
        [
            {
                "name": "cancel_order",
                "arguments": {"order_id": order.id, "reason": "no longer needed"},
            }
        ]
    )
    trajectory = replay(env, task, [cancel(order), lookup(customer), cancel(order), finish()])
    refused = trajectory.steps[0].observation
    assert refused.error and refused.error.startswith("Policy violation:")
    assert trajectory.steps[2].observation.error is None  # the later cancel went through
    assert not trajectory.passed
    assert "policy violated" in trajectory.verdict.feedback
    assert trajectory.verdict.metrics["violations"] == 1


def test_reads_before_identity_are_refused_without_a_violation():
    customer, order = order_with("pending")
    task = task_for(
        [
            {
                "name": "cancel_order",
                "arguments": {"order_id": order.id, "reason": "no longer needed"},
            }
        ]
    )
    calls = [ToolCall("get_order", {"order_id": order.id}), lookup(customer), cancel(order)]
    trajectory = replay(env, task, [*calls, finish()])
    assert "not confirmed" in (trajectory.steps[0].observation.error or "")
    assert trajectory.passed


@pytest.mark.parametrize("status", ["delivered", "processed", "cancelled"])
def test_only_pending_orders_can_be_cancelled(status):
    customer, order = order_with(status)
    world = World.open(SEED)
    tools = {fn.__name__: fn for fn in make_tools(world)}
    tools["find_customer_by_email"](customer.email)
    with pytest.raises(ToolError, match="Policy violation: cancel .* which is " + status):
        tools["cancel_order"](order.id, "no longer needed")
    assert world.one("SELECT status FROM orders WHERE id = ?", order.id)["status"] == status
    assert delta(world.conn, SEED) == {}


def test_returns_only_for_delivered_orders():
    customer, order = order_with("pending")
    session = env.session(task_for([], customer=customer.id))
    session.reset()
    session.step(lookup(customer))
    call = ToolCall(
        "return_items",
        {
            "order_id": order.id,
            "item_ids": [order.items[0].id],
            "refund_payment_method_id": order.payment_id,
        },
    )
    observation = session.step(call)
    assert observation.error and "Policy violation: return items of" in observation.error
    assert not session.verify().passed


def test_refunds_only_to_original_method_or_gift_card():
    shop = store(SEED)
    order = next(
        o
        for o in shop.orders.values()
        if o.status == "delivered"
        and any(
            p.startswith("card_") and p != o.payment_id
            for p in shop.customers[o.customer_id].payment_ids
        )
    )
    customer = shop.customers[order.customer_id]
    other_card = next(
        p for p in customer.payment_ids if p.startswith("card_") and p != order.payment_id
    )
    world = World.open(SEED)
    tools = {fn.__name__: fn for fn in make_tools(world)}
    tools["find_customer_by_email"](customer.email)
    with pytest.raises(ToolError, match="neither the original payment method"):
        tools["return_items"](order.id, [order.items[0].id], other_card)
    assert world.violations


def test_exchange_must_keep_the_product():
    shop = store(SEED)
    order = next(o for o in shop.orders.values() if o.status == "delivered")
    item = order.items[0]
    foreign = next(
        v
        for v in shop.variants.values()
        if v.product_id != shop.variants[item.variant_id].product_id
    )
    world = World.open(SEED)
    tools = {fn.__name__: fn for fn in make_tools(world)}
    tools["find_customer_by_email"](shop.customers[order.customer_id].email)
    with pytest.raises(ToolError, match="a different product"):
        tools["exchange_items"](order.id, [item.id], [foreign.id], order.payment_id)


def test_late_shipping_is_refunded_once():
    customer, order = order_with("delivered", late=True)
    world = World.open(SEED)
    tools = {fn.__name__: fn for fn in make_tools(world)}
    tools["find_customer_by_email"](customer.email)
    tools["refund_shipping"](order.id, order.payment_id)
    with pytest.raises(ToolError, match="a second time"):
        tools["refund_shipping"](order.id, order.payment_id)


# --- verification ---------------------------------------------------------------------------


def test_verifier_reports_the_differing_rows():
    customer, order = order_with("pending")
    wanted = {"order_id": order.id, "reason": "ordered by mistake"}
    task = task_for([{"name": "cancel_order", "arguments": wanted}])
    wrong = replay(env, task, [lookup(customer), cancel(order, "no longer needed"), finish()])
    assert not wrong.passed
    assert (
        f"orders {order.id}: cancel_reason is 'no longer needed', expected 'ordered by mistake'"
        in wrong.verdict.feedback
    )
    nothing = replay(env, task, [finish()])
    assert (
        f"orders {order.id}: status is 'pending', expected 'cancelled'" in nothing.verdict.feedback
    )
    assert "transactions: missing row" in nothing.verdict.feedback


def test_state_hash_ignores_the_order_of_independent_writes():
    shop = store(SEED)
    customer = next(
        c
        for c in shop.customers.values()
        if sum(shop.orders[o].status == "delivered" for o in c.order_ids) >= 2
    )
    first, second = [
        shop.orders[o] for o in customer.order_ids if shop.orders[o].status == "delivered"
    ][:2]

    def run(orders: list[Order]) -> tuple[str, dict]:
        world = World.open(SEED)
        tools = {fn.__name__: fn for fn in make_tools(world)}
        tools["find_customer_by_email"](customer.email)
        for order in orders:
            tools["return_items"](order.id, [order.items[0].id], order.payment_id)
        tables = {t: sorted(world.conn.execute(f"SELECT * FROM {t}"), key=repr) for t in TABLES}
        return fingerprint(delta(world.conn, SEED)), tables

    both, reversed_, one = run([first, second]), run([second, first]), run([first])
    assert both == reversed_  # same hash and the same full tables
    assert both[0] != one[0] and both[1] != one[1]


def test_a_change_undone_leaves_no_delta():
    customer = next(iter(store(SEED).customers.values()))
    world = World.open(SEED)
    tools = {fn.__name__: fn for fn in make_tools(world)}
    tools["find_customer_by_email"](customer.email)
    home = customer.address
    tools["modify_customer_address"](customer.id, "1 Test Rd", "Austin", "TX", "78701")
    assert delta(world.conn, SEED)
    tools["modify_customer_address"](customer.id, home.street, home.city, home.state, home.zip)
    assert delta(world.conn, SEED) == {}


@functools.cache
def info_task() -> Task:
    return next(
        t
        for t in env.tasks("test", 200)
        if t.family == "info" and t.params["facts"][0]["kind"] == "status"
    )


def test_facts_must_appear_in_the_answer():
    task = info_task()
    oracle = env.oracle(task)
    assert replay(env, task, oracle).passed
    lookup_call = oracle[0]
    vague = replay(env, task, [lookup_call, finish("I looked it up for you.")])
    assert not vague.passed and "does not state" in vague.verdict.feedback
    assert replay(env, task, [lookup_call]).verdict.passed is False  # never finished


def test_an_answer_listing_every_status_states_none():
    task = info_task()
    answer = env.oracle(task)[-1].arguments["answer"]
    hedged = answer + " Or it may be pending, processed, delivered or cancelled."
    trajectory = replay(env, task, [env.oracle(task)[0], finish(hedged)])
    assert not trajectory.passed


def _task_asking(kind: str) -> Task:
    return next(
        t for t in env.tasks("test", 300) if [f["kind"] for f in t.params["facts"]][:1] == [kind]
    )


def _answered(task: Task, answer: str) -> bool:
    return replay(env, task, [*env.oracle(task)[:-1], finish(answer)]).passed


@pytest.mark.parametrize("kind", ["total", "balance"])
def test_an_answer_listing_the_right_amount_among_others_fails(kind):
    task = _task_asking("status" if kind == "total" else kind)
    answer = env.oracle(task)[-1].arguments["answer"]
    amount = re.search(r"\$(\d+)\.(\d\d)", answer)
    dollars, cents = int(amount[1]), amount[2]
    hedged = answer.replace(
        amount[0], f"${dollars - 1}.{cents}, {amount[0]} or ${dollars + 1}.{cents}"
    )
    assert _answered(task, answer)
    assert not _answered(task, hedged)


def test_equivalent_amount_formats_are_accepted():
    task = next(
        t for t in env.tasks("test", 500)
        if [f["kind"] for f in t.params["facts"]] == ["balance"]
        and env.oracle(t)[-1].arguments["answer"].endswith("0.")
    )  # fmt: skip
    answer = env.oracle(task)[-1].arguments["answer"]
    amount = re.search(r"\$([\d,]+\.\d\d)", answer)[1]
    for variant in (amount.rstrip("0"), amount + "0", amount.replace(",", ""), f"USD {amount}"):
        assert _answered(task, answer.replace("$" + amount, variant)), variant


def test_naming_other_orders_hedges_the_facts_about_an_order():
    task = info_task()
    answer = env.oracle(task)[-1].arguments["answer"]
    order = task.params["facts"][0]["order_id"]
    neighbour = f"#W{int(order[2:]) + 1:07d}"
    assert not _answered(task, answer.replace(order, f"{order} or {neighbour}"))


def test_pending_orders_must_be_listed_alone():
    task = _task_asking("pending_orders")
    answer = env.oracle(task)[-1].arguments["answer"]
    assert _answered(task, answer)
    assert not _answered(task, answer.rstrip(".") + ", #W0000001.")


def test_facts_are_found_in_free_wording():
    task = info_task()
    world = World.open(task.params["db_seed"])
    order_id = task.params["facts"][0]["order_id"]
    tools = {fn.__name__: fn for fn in make_tools(world)}
    tools["find_customer_by_email"](
        store(task.params["db_seed"]).customers[task.params["customer_id"]].email
    )
    shown = tools["get_order"](order_id)
    world.close()
    answer = f"It's {shown['status'].upper()} and cost {shown['total']} in all ({order_id})."
    assert replay(env, task, [*env.oracle(task)[:-1], finish(answer)]).passed


def test_a_fact_counts_only_if_the_session_looked_it_up():
    # Statuses are few: "delivered" alone, with no call at all, once passed about a third of
    # the status questions. A fact now counts only if a read of the session showed it.
    task = info_task()
    lookup_call, *reads, answer = env.oracle(task)
    guessed = replay(env, task, [lookup_call, answer])
    assert not guessed.passed
    assert "never looked up" in guessed.verdict.feedback
    assert not replay(env, task, [answer]).passed
    assert replay(env, task, [lookup_call, *reads, answer]).passed
    customer = task.params["customer_id"]
    listed = ToolCall("list_orders", {"customer_id": customer})
    assert replay(env, task, [lookup_call, listed, answer]).passed  # list_orders shows it too


def test_pending_orders_are_looked_up_by_listing_or_reading_every_order():
    task = next(
        t for t in env.tasks("test", 300, difficulty=2)
        if [f["kind"] for f in t.params["facts"]] == ["pending_orders"]
    )  # fmt: skip
    lookup_call, _, answer = env.oracle(task)
    customer = store(task.params["db_seed"]).customers[task.params["customer_id"]]
    reads = [ToolCall("get_order", {"order_id": o}) for o in customer.order_ids]
    assert replay(env, task, [lookup_call, *reads, answer]).passed
    assert not replay(env, task, [lookup_call, *reads[:-1], answer]).passed or len(reads) == 1


# --- sessions -------------------------------------------------------------------------------


def test_sessions_of_the_same_task_do_not_share_state():
    customer, order = order_with("pending")
    task = task_for(
        [
            {
                "name": "cancel_order",
                "arguments": {"order_id": order.id, "reason": "no longer needed"},
            }
        ]
    )
    one, two = env.session(task), env.session(task)
    for session in (one, two):
        session.reset()
        session.step(lookup(customer))
    one.step(cancel(order))
    shown = two.step(ToolCall("get_order", {"order_id": order.id}))
    assert '"status": "pending"' in shown.text
    assert one.verify().passed and not two.verify().passed
    one.close()
    two.close()
    third = World.open(SEED)
    assert third.one("SELECT status FROM orders WHERE id = ?", order.id)["status"] == "pending"


def test_fresh_copy_is_private():
    copy = fresh_copy(SEED)
    copy.execute("UPDATE variants SET stock = 999")
    assert store(SEED).conn.execute("SELECT MAX(stock) FROM variants").fetchone()[0] < 999


# --- hindsight relabelling ------------------------------------------------------------------


def test_describe_names_what_oracle_trajectories_did():
    described = 0
    for task in env.tasks("train", 48):
        trajectory = replay(env, task, env.oracle(task))
        relabelled = describe_task(env, trajectory)
        assert relabelled is not None, task.instruction
        if not task.params["writes"]:
            assert relabelled.family == task.family
            assert (
                relabelled.params["facts"] == task.params["facts"][-1:]
                or relabelled.params["facts"] == task.params["facts"]
            )
            continue
        described += 1
        calls = [s.call for s in trajectory.steps if s.call]
        assert replay(env, relabelled, calls).passed
        assert not replay(env, relabelled, [finish()]).passed
    assert described >= 30


def test_describe_rejects_trajectories_with_violations():
    customer, order = order_with("pending")
    task = task_for([], customer=customer.id)
    trajectory = replay(env, task, [cancel(order), lookup(customer), cancel(order), finish()])
    assert describe_task(env, trajectory) is None


def random_calls(rng: random.Random, task: Task) -> list[ToolCall]:
    """Random tool calls with plausible arguments drawn from the task's store."""
    shop = store(task.params["db_seed"])
    customer = shop.customers[task.params["customer_id"]]
    if rng.random() < 0.2:  # sometimes act for someone else
        customer = shop.customers[rng.choice(sorted(shop.customers))]
    calls = [lookup(customer)] if rng.random() < 0.85 else []
    for _ in range(rng.randint(1, 4)):
        order = shop.orders[rng.choice(customer.order_ids)]
        item = rng.choice(order.items)
        same_product = [
            v.id
            for v in shop.variants.values()
            if v.product_id == shop.variants[item.variant_id].product_id
        ]
        payment = rng.choice(customer.payment_ids)
        address = {
            "street": f"{rng.randint(1, 99)} Elm St",
            "city": "Boise",
            "state": "ID",
            "zip_code": "83702",
        }
        calls.append(
            rng.choice(
                [
                    cancel(order, rng.choice(["no longer needed", "ordered by mistake"])),
                    ToolCall("modify_order_address", {"order_id": order.id, **address}),
                    ToolCall("modify_customer_address", {"customer_id": customer.id, **address}),
                    ToolCall(
                        "modify_order_items",
                        {
                            "order_id": order.id,
                            "item_ids": [item.id],
                            "new_variant_ids": [rng.choice(same_product)],
                            "payment_method_id": payment,
                        },
                    ),
                    ToolCall(
                        "exchange_items",
                        {
                            "order_id": order.id,
                            "item_ids": [item.id],
                            "new_variant_ids": [rng.choice(same_product)],
                            "payment_method_id": payment,
                        },
                    ),
                    ToolCall(
                        "return_items",
                        {
                            "order_id": order.id,
                            "item_ids": [item.id],
                            "refund_payment_method_id": payment,
                        },
                    ),
                    ToolCall(
                        "refund_shipping",
                        {"order_id": order.id, "refund_payment_method_id": payment},
                    ),
                    ToolCall("get_order", {"order_id": order.id}),
                ]
            )
        )
    return [*calls, finish()]


def test_describe_yields_passing_tasks_for_random_explorations():
    rng = random.Random(7)
    tasks = env.tasks("train", 80)
    yielded = 0
    for task in tasks:
        calls = random_calls(rng, task)
        trajectory: Trajectory = replay(env, task, calls)
        spec = describe_task(env, trajectory)
        if spec is None:
            continue
        yielded += 1
        relabelled = make_task("shop", spec, difficulty=task.difficulty)
        assert 1 <= relabelled.difficulty <= 5
        assert replay(env, relabelled, calls).passed
        assert not replay(env, relabelled, [finish()]).passed
        assert replay(env, relabelled, env.oracle(relabelled)).passed
    assert yielded >= 5


# --- closed argument sets and subgoal relabelling -------------------------------------------


def test_ids_must_have_their_shape_and_products_come_from_the_store():
    customer, order = order_with("pending")
    session = env.session(task_for([], customer=customer.id))
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in session.reset().tools}
    products = sorted({v.product_id for v in store(SEED).variants.values()})
    assert tools["get_product"]["properties"]["product_id"]["enum"] == products
    assert "pattern" in tools["get_order"]["properties"]["order_id"]
    session.step(lookup(customer))
    for call in (
        ToolCall("get_order", {"order_id": "12345"}),
        ToolCall("get_customer", {"customer_id": "John Smith"}),
        ToolCall("get_product", {"product_id": "P0000"}),
        ToolCall("cancel_order", {"order_id": order.id, "reason": "too expensive"}),
    ):
        observation = session.step(call)
        assert observation.error and observation.error.startswith(f"bad arguments for {call.name}")
    assert session.step(ToolCall("get_order", {"order_id": order.id.lower()})).error is None
    session.close()


def prefix_views(trajectory: Trajectory) -> list[list[ToolCall]]:
    """The episode cut after each successful action, finished with what that action showed."""
    views = []
    for end, step in enumerate(trajectory.steps, 1):
        if step.call is None or step.failed or step.call.name == "finish":
            continue
        calls = [s.call for s in trajectory.steps[:end] if s.call]
        views.append([*calls, finish(step.observation.text)])
    return views


def returns_with_an_item_kept() -> tuple[Task, ToolCall, str]:
    """A return task whose order holds an item the customer keeps, and that item's id."""
    for task in env.tasks("train", 200, difficulty=3):
        if task.family != "return":
            continue
        write = next(c for c in env.oracle(task) if c.name == "return_items")
        order = store(task.params["db_seed"]).orders[write.arguments["order_id"]]
        kept = [i.id for i in order.items if i.id not in write.arguments["item_ids"]]
        if kept:
            return task, write, kept[0]
    raise AssertionError("no return task keeps an item")


def test_a_failed_episode_is_relabelled_to_the_questions_and_writes_its_prefixes_reached():
    task, write, kept = returns_with_an_item_kept()
    shop = store(task.params["db_seed"])
    order = shop.orders[write.arguments["order_id"]]
    other = next(o for o in shop.customers[order.customer_id].order_ids if o != order.id)
    wrong = {**write.arguments, "item_ids": [kept]}
    lookup_call = env.oracle(task)[0]
    calls = [
        lookup_call,
        ToolCall("get_order", {"order_id": other}),
        ToolCall("return_items", wrong),
    ]
    failed = replay(env, task, calls)
    assert not failed.passed and not any(s.failed for s in failed.steps)
    views = prefix_views(failed)
    described = [describe_task(env, replay(env, task, view)) for view in views]
    identity = described[0]  # confirming identity found out the customer's id
    assert identity is not None and identity.family == "identity" and identity.difficulty == 1
    assert identity.params["customer_id"] == order.customer_id
    question = described[1]
    assert question is not None and question.family == "info" and question.difficulty == 2
    # The order's view also lists item prices, so the answer hedges on the total: only the
    # status is stated alone.
    assert question.params["facts"] == [{"kind": "status", "order_id": other}]
    assert question.instruction.endswith(f"What is the status of my order {other}?")
    returned = described[2]
    assert returned is not None and returned.family == "return"
    assert returned.params["writes"] == [{"name": "return_items", "arguments": wrong}]
    for found, view in zip(described, views, strict=True):
        assert replay(env, found, view).passed


def test_an_episode_that_found_nothing_out_is_not_relabelled():
    customer, order = order_with("pending")
    stranger = next(c for c in store(SEED).customers.values() if c.id != customer.id)
    task = task_for([], customer=customer.id)
    calls = [
        ToolCall("get_order", {"order_id": order.id}),  # before identity: refused
        lookup(stranger),
        ToolCall("get_order", {"order_id": order.id}),  # someone else's order: refused
        finish("Your order is pending."),
    ]
    trajectory = replay(env, task, calls)
    assert describe_task(env, trajectory) is None
    # The one thing it found out is who the stranger is; nothing about the order.
    described = [describe_task(env, replay(env, task, v)) for v in prefix_views(trajectory)]
    assert [d.family if d else None for d in described] == ["identity"]
    assert described[0].params["customer_id"] == stranger.id


def test_a_relabelled_request_identifies_the_customer_the_way_the_episode_did():
    customer, order = order_with("pending")
    by_name = ToolCall(
        "find_customer_by_name_zip",
        {
            "first_name": customer.first_name,
            "last_name": customer.last_name,
            "zip_code": customer.address.zip,
        },
    )
    task = task_for([], customer=customer.id)
    for calls in ([by_name], [by_name, cancel(order)]):
        trajectory = replay(env, task, [*calls, finish(f"It is {customer.id}.")])
        spec = describe_task(env, trajectory)
        assert spec is not None and f"zip code {customer.address.zip}" in spec.instruction
        assert customer.email not in spec.instruction
    trajectory = replay(env, task, [lookup(customer), finish(f"It is {customer.id}.")])
    assert customer.email in describe_task(env, trajectory).instruction

"""A bulk job acts in its actor's name: what stops the person stops the job (SPEC section 10).
A user disabled, a token revoked, a role taken back: the job is cancelled, saying why, and
nothing more is done in their name. Scopes narrowed: the items outside them are skipped."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import create_token, create_user, revoke_token, set_disabled, set_role_and_scopes
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.db.models import Action
from dlq_dashboard.scopes import parse_scopes

from . import support

pytestmark = pytest.mark.both_databases


def finished(rt, job_id: int) -> dict:
    support.jobs_settled(rt.engine)
    return jobs.job_status(rt, job_id, limit=100)


def cancels(rt, job_id: int) -> list[tuple]:
    with rt.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(Action.actor, Action.note).where(
            Action.job_id == job_id, Action.action == "cancel_job"))]


def test_a_republish_job_of_a_user_disabled_before_it_ran_is_cancelled_and_publishes_nothing(app, rt, nats_server):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "o-%d"}' % i for i in range(4)])
    create_user(rt.engine, "opo", support.PASSWORD, "operator")
    job_id = jobs.create_job(rt, "republish", actor="opo", ids=ids, start=False)
    set_disabled(rt.engine, "opo", True)
    rt.jobs.submit(job_id)
    status = finished(rt, job_id)
    assert (status["state"], status["done"], status["cancelled"]) == ("cancelled", 0, 4)
    assert status["cancelled_by"] == "dlq-dashboard (opo may no longer act: the user was disabled.)"
    assert cancels(rt, job_id) == [("dlq-dashboard", "opo may no longer act: the user was disabled.")]
    assert support.stream_messages(nats_server.url) == []
    assert {rt.store.get_entry(i, with_history=False).status for i in ids} == {"open"}


@pytest.mark.parametrize("withdraw, why", [
    (lambda engine: revoke_token(engine, "nightly"), "its token was revoked"),
    (lambda engine: set_role_and_scopes(engine, "opo", "viewer", None), "its role is viewer now"),
], ids=["token-revoked", "role-lowered"])
def test_a_close_job_whose_actor_may_no_longer_act_is_cancelled(offline_app, rt, withdraw, why):
    ids = [support.dead_letter(offline_app, seq, Dlq_Reason="fatal") for seq in range(1, 4)]
    create_user(rt.engine, "opo", support.PASSWORD, "operator")
    create_token(rt.engine, "nightly", "operator")
    actor = "token:nightly" if "token" in why else "opo"
    job_id = jobs.create_job(rt, "close", actor=actor, ids=ids, note="known", start=False)
    withdraw(rt.engine)
    rt.jobs.submit(job_id)
    status = finished(rt, job_id)
    assert (status["state"], status["done"]) == ("cancelled", 0)
    assert status["cancelled_by"] == f"dlq-dashboard ({actor} may no longer act: {why}.)"
    assert {rt.store.get_entry(i, with_history=False).status for i in ids} == {"open"}


def test_scopes_narrowed_before_the_job_ran_skip_the_items_outside_them_and_the_others_go_on(offline_app, rt):
    created = [support.dead_letter(offline_app, seq, subject="orders.created", Dlq_Reason="fatal") for seq in (1, 2)]
    updated = [support.dead_letter(offline_app, seq, subject="orders.updated", Dlq_Reason="fatal") for seq in (3, 4)]
    create_user(rt.engine, "opo", support.PASSWORD, "operator", parse_scopes(["orders.>"]))
    job_id = jobs.create_job(rt, "close", actor="opo", ids=created + updated, note="known", start=False)
    set_role_and_scopes(rt.engine, "opo", "operator", parse_scopes(["orders.created"]))
    rt.jobs.submit(job_id)
    status = finished(rt, job_id)
    assert (status["state"], status["done"], status["skipped"]) == ("done", 2, 2)
    items = {i["entry_id"]: i for i in status["items"]}
    assert [items[i]["state"] for i in created + updated] == ["done", "done", "skipped", "skipped"]
    assert items[updated[0]]["result"] == ("Skipped: outside opo's scopes now (orders.created); they were "
                                           "narrowed after the job started.")
    assert [rt.store.get_entry(i, with_history=False).status for i in created + updated] == [
        "closed", "closed", "open", "open"]


def test_a_name_the_dashboard_does_not_keep_is_not_checked(offline_app, rt):
    """The command line's, or a trusted proxy's user: no row says what it may do, so it is not stopped."""
    ids = [support.dead_letter(offline_app, seq, Dlq_Reason="fatal") for seq in range(1, 3)]
    job_id = jobs.create_job(rt, "close", actor="proxy-user", ids=ids, note="known")
    status = finished(rt, job_id)
    assert (status["state"], status["done"]) == ("done", 2)


def test_a_job_a_person_cancelled_is_not_cancelled_again_by_the_watch(offline_app, rt):
    """The watch read whether the job was asked to stop, then cancelled it in a transaction of its
    own: a person's cancel in between got a second cancel record, in the dashboard's name."""
    from dlq_dashboard.actions.bulk.standing import ActorWatch

    ids = [support.dead_letter(offline_app, seq, Dlq_Reason="fatal") for seq in range(1, 3)]
    create_user(rt.engine, "opo", support.PASSWORD, "operator")
    job_id = jobs.create_job(rt, "close", actor="opo", ids=ids, note="known", start=False)
    assert jobs.cancel_job(rt, job_id, actor="mara")
    set_disabled(rt.engine, "opo", True)
    assert ActorWatch(rt, job_id).settle() is False
    assert cancels(rt, job_id) == [("mara", None)]
    assert jobs.job_status(rt, job_id, limit=0)["cancelled_by"] == "mara"

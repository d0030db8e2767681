"""The Optuna journal in DynamoDB: appends are atomic, ordered, and never overwrite."""

from __future__ import annotations

import threading
from typing import Any

import optuna
from botocore.exceptions import ClientError
from optuna.storages import JournalStorage

from respot.sweep.journal import DynamoJournalBackend
from respot.sweep.table import SweepTable


class _Isolated:
    """The moto server's client with DynamoDB's transaction isolation put back.

    moto undoes a failed transaction by restoring a copy of the whole table taken before it,
    which also undoes other writers' transactions that succeeded meanwhile; DynamoDB never
    does. Serializing transactions (queries still interleave freely) restores the service's
    guarantee that the journal relies on.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def transact_write_items(self, **kwargs: Any) -> Any:
        with self._lock:
            return self._client.transact_write_items(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_logs_come_back_in_order_from_any_position(table: SweepTable) -> None:
    journal = table.journal("s1")
    journal.append_logs([{"op": 1}, {"op": 2}])
    journal.append_logs([{"op": 3}])
    assert list(journal.read_logs(0)) == [{"op": 1}, {"op": 2}, {"op": 3}]
    assert list(table.journal("s1").read_logs(2)) == [{"op": 3}]
    assert list(table.journal("other").read_logs(0)) == []


def test_concurrent_writers_never_take_the_same_number(table: SweepTable) -> None:
    # GIVEN four writers, each with its own view of the journal (as separate Lambdas have)
    isolated = _Isolated(table.client)

    def write(worker: int) -> None:
        journal = DynamoJournalBackend(table.table_name, "race", isolated)
        for i in range(10):
            journal.append_logs(
                [{"w": worker, "i": i, "part": 0}, {"w": worker, "i": i, "part": 1}]
            )

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # THEN every log is there once, and each append's two logs are adjacent (atomic)
    logs = list(table.journal("race").read_logs(0))
    assert len(logs) == 80
    assert {(log["w"], log["i"], log["part"]) for log in logs} == {
        (w, i, p) for w in range(4) for i in range(10) for p in (0, 1)
    }
    for first, second in zip(logs[::2], logs[1::2], strict=True):
        assert (first["part"], second["part"]) == (0, 1)
        assert (first["w"], first["i"]) == (second["w"], second["i"])


def test_an_optuna_study_survives_a_new_process(table: SweepTable) -> None:
    # GIVEN a study optimized on the DynamoDB journal
    storage = JournalStorage(table.journal("study"))
    study = optuna.create_study(storage=storage, study_name="respot", direction="minimize")
    study.optimize(lambda t: (t.suggest_float("x", -3, 3) - 1) ** 2, n_trials=8)
    # WHEN another process (a fresh storage) opens it
    again = optuna.load_study(study_name="respot", storage=JournalStorage(table.journal("study")))
    # THEN it sees the same trials and the same best
    assert len(again.trials) == 8
    assert again.best_value == study.best_value
    assert again.best_params == study.best_params


class _Cancelled:
    """A client whose first transactions are cancelled with nothing written, as DynamoDB
    cancels both of two racing transactions (TransactionConflict)."""

    def __init__(self, client: Any, cancels: int) -> None:
        self._client = client
        self.cancels = cancels

    def transact_write_items(self, **kwargs: Any) -> Any:
        if self.cancels:
            self.cancels -= 1
            error = {"Error": {"Code": "TransactionCanceledException", "Message": "conflict"}}
            raise ClientError(error, "TransactWriteItems")  # type: ignore[arg-type]
        return self._client.transact_write_items(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_an_append_whose_transaction_was_cancelled_leaves_no_gap(table: SweepTable) -> None:
    # GIVEN a writer whose first two tries are cancelled by conflicts, nothing written
    writer = DynamoJournalBackend(table.table_name, "conflict", _Cancelled(table.client, 2))
    # WHEN it appends, then appends again
    writer.append_logs([{"op": 1}, {"op": 2}])
    writer.append_logs([{"op": 3}])
    # THEN its logs take the first numbers: a reader sees all of them, in order
    assert list(table.journal("conflict").read_logs(0)) == [{"op": 1}, {"op": 2}, {"op": 3}]

"""Instruction prefixes and ``input_type``: what reaches the service, and the fingerprint.

Runs against the deterministic local embedding server, which records every
request body, so the test sees exactly the texts the model would embed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import ALICE, NOMIC, make_runtime
from tests.helpers import new_memory, view_of
from tests.lazy import lazy_import
from tests.servers import EmbeddingServer

E = lazy_import("amrita_plugin_memory.embedding")
F = lazy_import("amrita_plugin_memory.embedding.fingerprint")
R = lazy_import("amrita_plugin_memory.embedding.report_json")


@pytest.fixture
async def runtimes(embed_server: EmbeddingServer) -> AsyncIterator[Callable[..., Any]]:
    made: list[Any] = []

    def factory(data_dir: Path, **kwargs: Any) -> Any:
        rt = make_runtime(data_dir, **kwargs)
        made.append(rt)
        return rt

    yield factory
    for rt in made:
        await rt.close()


def inputs(server: EmbeddingServer) -> list[Any]:
    """Each embedding request's ``input`` (and ``input_type`` when sent)."""
    out: list[Any] = []
    for r in server.embed_requests():
        body = r["body"] or {}
        out.append((body.get("input"), body.get("input_type")))
    return out


@pytest.mark.parametrize("protocol", ["ollama-embed", "openai"])
async def test_prefixes_reach_the_server_for_documents_and_queries(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer, protocol: str
) -> None:
    rt = runtimes(
        tmp_path,
        embedding_proctol=protocol,
        embedding_model_name=NOMIC,
        embedding_query_prefix="query: ",
        embedding_document_prefix="passage: ",
    )
    record = await rt.store.add(new_memory(ALICE, "user", "我家的猫叫年糕", tags=["宠物"]))
    await rt.store.update(ALICE, record.id, content="我家的猫叫年糕，三岁了")
    await rt.store.query(view_of(ALICE), "猫叫什么", top_k=1)
    assert inputs(embed_server) == [
        (["passage: 我家的猫叫年糕"], None),
        (["passage: 我家的猫叫年糕，三岁了"], None),
        (["query: 猫叫什么"], None),
    ]
    # What is stored is the text itself, never the prefix.
    stored = await rt.store.get(view_of(ALICE), record.id)
    assert stored is not None and stored.content == "我家的猫叫年糕，三岁了"


async def test_no_prefix_by_default_sends_raw_text(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = runtimes(tmp_path, embedding_model_name=NOMIC)
    await rt.store.add(new_memory(ALICE, "user", "住在越秀区", tags=["住址"]))
    await rt.store.query(view_of(ALICE), "住在哪", top_k=1)
    assert inputs(embed_server) == [(["住在越秀区"], None), (["住在哪"], None)]


async def test_input_type_e5_is_sent_with_openai_only(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = runtimes(
        tmp_path, embedding_proctol="openai", embedding_model_name=NOMIC, embedding_input_type="e5"
    )
    await rt.store.add(new_memory(ALICE, "user", "喜欢喝乌龙茶", tags=["饮品"]))
    await rt.store.query(view_of(ALICE), "爱喝什么茶", top_k=1)
    assert inputs(embed_server) == [(["喜欢喝乌龙茶"], "passage"), (["爱喝什么茶"], "query")]


async def test_reembedding_uses_the_document_prefix(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    rt = runtimes(tmp_path, embedding_model_name=NOMIC, embedding_document_prefix="passage: ")
    await rt.store.add(new_memory(ALICE, "user", "生日是三月五日", tags=["生日"]))
    await E.reset_fingerprint(rt.maintenance)
    embed_server.reset()
    await E.remap(rt.maintenance)
    texts = [t for batch, _ in inputs(embed_server) for t in batch]
    assert "passage: 生日是三月五日" in texts and "生日是三月五日" not in texts


async def test_fingerprint_keeps_the_old_hash_without_prefixes(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    plain = await E.current_fingerprint(
        runtimes(tmp_path / "a", embedding_model_name=NOMIC).embedder
    )
    assert plain.fingerprint == E.compute_fingerprint("ollama-embed", NOMIC, embed_server.url)
    assert plain.text_format == ""

    async def fp(**env: Any) -> Any:
        rt = runtimes(tmp_path / uuid.uuid4().hex, embedding_model_name=NOMIC, **env)
        return await E.current_fingerprint(rt.embedder)

    q1 = await fp(embedding_query_prefix="query: ")
    q2 = await fp(embedding_query_prefix="search_query: ")
    d1 = await fp(embedding_document_prefix="query: ")
    digests = {plain.fingerprint, q1.fingerprint, q2.fingerprint, d1.fingerprint}
    assert len(digests) == 4  # every change of the text format is another vector space
    openai = await fp(embedding_proctol="openai")
    it = await fp(embedding_proctol="openai", embedding_input_type="e5")
    assert openai.text_format == "" and it.fingerprint != openai.fingerprint
    # input_type is an OpenAI request field: ignored (and not fingerprinted) with Ollama.
    assert (await fp(embedding_input_type="e5")).fingerprint == plain.fingerprint
    assert not plain.same_service(q1) and not q1.same_service(d1)
    assert q1.same_service(await fp(embedding_query_prefix="query: "))
    # Round trip through the collection metadata and the JSON of backups.
    assert E.FingerprintInfo.from_meta(q1.as_meta()) == q1
    assert E.FingerprintInfo.from_json(q1.to_json()) == q1
    legacy_meta = {k: v for k, v in plain.as_meta().items() if k != "embedding_text_format"}
    assert E.FingerprintInfo.from_meta(legacy_meta) == plain
    # The status JSON (console, `ambot memory status` via a running bot) shows the text format.
    rt = runtimes(tmp_path / "s", embedding_model_name=NOMIC, embedding_query_prefix="query: ")
    shown = R.status_json(await E.collect_status(rt.maintenance), tmp_path)["fingerprint"]
    assert shown["current"]["text_format"] == q1.text_format != ""


def _never_called(question: str) -> bool:
    raise AssertionError(f"confirm must not be called: {question}")


async def test_changing_a_prefix_runs_the_mismatch_policy(
    tmp_path: Path, runtimes: Callable[..., Any], embed_server: EmbeddingServer
) -> None:
    first = runtimes(tmp_path, embedding_model_name=NOMIC)
    check = E.run_startup_check(first.maintenance, interactive=False, confirm=_never_called)
    assert check.action == "fresh"
    await first.store.add(new_memory(ALICE, "user", "生日是三月五日", tags=["生日"]))
    await first.close()
    # The same prefixes-free configuration again: no remap needed.
    same = runtimes(tmp_path, embedding_model_name=NOMIC)
    check = E.run_startup_check(same.maintenance, interactive=False, confirm=_never_called)
    assert check.action == "match", check.message
    await same.close()
    changed = runtimes(
        tmp_path,
        embedding_model_name=NOMIC,
        embedding_document_prefix="passage: ",
        embed_mismatch_policy="auto",
    )
    embed_server.reset()
    check = E.run_startup_check(changed.maintenance, interactive=False, confirm=_never_called)
    assert check.action == "remapped", check.message
    texts = [t for batch, _ in inputs(embed_server) for t in batch]
    assert texts == ["passage: 生日是三月五日"]
    stored = await E.stored_fingerprint(changed.store)
    assert stored is not None and stored.text_format == F.text_format(changed.embedder) != ""

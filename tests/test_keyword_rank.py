"""The keyword benchmark's own rankings (``bench/keyword_rank.py``): term schemes and BM25."""

from __future__ import annotations

import pytest

from bench.keyword_rank import BM25, bigram_terms, cjk_characters, plugin_terms, unigram_terms


def test_bigram_terms_cut_chinese_into_overlapping_pairs_and_english_into_words() -> None:
    assert bigram_terms("我喜欢猫 I like CATS") == ["我喜", "喜欢", "欢猫", "i", "like", "cats"]
    assert bigram_terms("猫，ＡＢＣ12") == ["猫", "abc12"]


def test_unigram_terms_add_every_cjk_character_to_the_plugins_terms() -> None:
    assert cjk_characters("我的猫a") == ["我", "的", "猫"]
    assert unigram_terms("喝茶 tea") == [*plugin_terms("喝茶 tea"), "喝", "茶"]


def test_bm25_prefers_rare_terms_and_shorter_documents() -> None:
    docs = ["the cat sat", "the cat sat on the mat with a hat", "dogs bark"]
    model = BM25(docs, bigram_terms)
    assert model.rank("cat", 10) == [0, 1]  # same tf: the shorter first
    assert model.rank("bark", 10) == [2]
    assert model.rank("unknown", 10) == []
    assert model.idf("dogs") > model.idf("cat") > 0
    scores = model.scores("cat")
    # k1 1.2, b 0.75 by hand for the first document.
    n_len, avg = 3, (3 + 9 + 2) / 3
    idf = model.idf("cat")
    assert scores[0] == pytest.approx(idf * 2.2 / (1 + 1.2 * (0.25 + 0.75 * n_len / avg)))

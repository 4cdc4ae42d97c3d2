"""Speech blocks in long-term memory: found by their words, and by meaning.

A question about what was said ("when did someone say 'seven'?", "what did she say about the keys?") is matched
against the transcripts of the speech blocks memory holds: exactly by its words (a quoted phrase first, else its
content words; case, punctuation and numbers written as digits or words ignored: language/text.words), then by
the embedder's vectors (FAISS inner product over the speech blocks alone, so that a question about the picture is
searched among the video blocks exactly as without sound).

    index = SpeechIndex(dim)
    index.add(block_id, "Put the keys on the table.", vector)
    index.search("Where did she say the keys were?", vector, k=4)   # [block ids], best first
"""

from __future__ import annotations

import re
import threading

import faiss
import numpy as np

from streamvid.language.text import holds, words

STOP = set("""a an the and or but of to in on at by for with from about is are was were be been am do does did done
it its this that these those there here what which who whom whose when where why how i you he she we they me him
her us them my your his our their someone somebody anyone anybody something anything say says said saying tell
told speak spoke talk talked hear heard word words just ever again please any some one any time minute second
seconds minutes ago before after now then""".split())


def quoted(text: str) -> str | None:
    """The phrase a question quotes ('seven', "stop it", “help”), if any."""
    m = re.search(r"[\"“”']([^\"“”']+)[\"“”']", text)
    return m.group(1).strip() if m and m.group(1).strip() else None


class SpeechIndex:
    """The speech blocks of one memory: id -> words, and their vectors in a FAISS inner-product index."""

    def __init__(self, dim: int):
        self.dim = dim
        self._lock = threading.Lock()
        self._index = faiss.IndexIDMap(faiss.IndexFlatIP(dim))
        self._text: dict[int, str] = {}  # insertion order = time order

    def __len__(self) -> int:
        return len(self._text)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._text

    def add(self, block_id: int, text: str, vector: np.ndarray) -> None:
        rows = np.asarray(vector, np.float32).reshape(-1, self.dim)
        with self._lock:
            self._text[block_id] = text
            self._index.add_with_ids(rows, np.full(len(rows), block_id, dtype=np.int64))

    def remove(self, block_id: int) -> None:
        with self._lock:
            if self._text.pop(block_id, None) is not None:
                self._index.remove_ids(np.array([block_id], dtype=np.int64))

    def text(self, block_id: int) -> str | None:
        return self._text.get(block_id)

    def search(self, question: str, vector: np.ndarray | None, k: int) -> list[int]:
        """Up to k speech blocks for `question`: those saying its quoted phrase (newest first), else those sharing
        the most of its content words; when none does, the nearest by `vector` (None: words only)."""
        if k <= 0:
            return []
        with self._lock:
            texts = list(self._text.items())
        phrase = quoted(question)
        if phrase is not None:
            found = [i for i, t in reversed(texts) if holds(t, phrase)]
        else:
            want = {w for w in words(question) if w not in STOP}
            scored = [(len(want & set(words(t))), i) for i, t in texts]
            found = [i for n, i in sorted(scored, key=lambda x: (-x[0], -x[1])) if n > 0]
        found = found[:k]
        if vector is not None and not found:  # no words in common: the nearest by meaning
            with self._lock:
                if self._index.ntotal:
                    _, ids = self._index.search(np.asarray(vector, np.float32)[None], min(k, self._index.ntotal))
                    found += [i for i in ids[0].tolist() if i >= 0 and i not in found]
        return found[:k]

"""RowByRow: the batched operations of the adapter protocol done one row at a time, from the single-row methods
(`encode_chunk`, `probe`, `generate`). For adapters that do not batch: test doubles, or a new family before its
batched forwards are written. The engine's results are the same, one forward per row."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from streamvid.types import ChunkJob, Context, Encoded


class RowDecoding:
    """A `generate` iterator stepped one token per `decode` call (see adapters.batching.Decoding)."""

    def __init__(self, pieces: Iterator[str]):
        self._pieces = pieces
        self._piece = ""
        self.tokens: list[int] = []  # one entry per generated token (the ids are the adapter's own business here)
        self.done = False

    def advance(self) -> None:
        try:
            self._piece = next(self._pieces)
            self.tokens.append(len(self.tokens))
        except StopIteration:
            self.done = True

    def piece(self) -> str:
        return self._piece

    def cancel(self) -> None:
        self.done = True
        close = getattr(self._pieces, "close", None)
        if close is not None:
            close()


class RowByRow:
    """Mixin: `encode_chunks`, `probe_rows`, `start_decoding` and `decode` over the class's single-row methods."""

    def encode_chunks(self, jobs: Sequence[ChunkJob]) -> list[Encoded]:
        return [self.encode_chunk(list(j.frames), j.past, j.seconds_per_chunk, t_start_s=j.t_start_s) for j in jobs]

    def probe_rows(self, rows: Sequence[tuple[Context, str]]) -> list[float]:
        return [self.probe(context, question) for context, question in rows]

    def start_decoding(self, context: Context, prompt: str, max_new_tokens: int) -> RowDecoding:
        return RowDecoding(iter(self.generate(context, prompt, max_new_tokens)))

    def decode(self, decodings: Sequence[RowDecoding]) -> None:
        for d in decodings:
            if not d.done:
                d.advance()

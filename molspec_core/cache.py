"""Caller-owned KV cache for the decoder.

Self-attention keys/values live in preallocated slots (B, H, capacity, head_dim) per layer; a row's
valid prefix is `lengths[b]`. A decoder call feeds new tokens as (B, N, T): N branches (draft rows)
of T tokens that all continue the same cached prefix of their row. Their keys/values are kept in
`pending` until `commit(branch, n_keep)` writes the chosen branch's first tokens into the slots.
So the prefix is never copied per draft, and rolling back is only a length change: slots past
`lengths` are masked, never cleared.

A call with one branch per row is the lean one: it writes its keys/values into the slots past
`lengths` at once, and `commit` only counts them (`written_in_place`).

Cross-attention keys/values are computed once per query (`set_memory`) and reused every step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


def _numpy_ok(t: torch.Tensor) -> bool:
    """A CPU tensor of a dtype NumPy has: rows are moved through zero-copy NumPy views (a quarter of
    torch's time for a beam step's rows, measured)."""
    return t.device.type == "cpu" and t.dtype in (torch.float32, torch.float16)


def _keeps_some_in_order(rows: np.ndarray, batch: int) -> bool:
    """rows are some of a batch's rows, each once, in their order: finished queries leaving a batch."""
    if len(rows) >= batch:
        return False
    return len(rows) == 0 or (rows[0] >= 0 and rows[-1] < batch and bool((np.diff(rows) > 0).all()))


def _compacted(slots: torch.Tensor, rows: np.ndarray, upto: int) -> torch.Tensor:
    """Only `rows` (ascending) of a contiguous CPU slot tensor (G, B, ...), moved down in its own memory:
    the result is a contiguous (G, len(rows), ...) view of the start of `slots`, holding those rows'
    slots up to `upto`. A fresh zeroed tensor each time a query of a batch finished cost a third of
    a CPU beam search of 32 queries (measured, forward model, width 5), so nothing is allocated.

    Moves overlap safely: group g's kept rows are read into a copy before they are written, and its
    new place ends before group g + 1's old one begins (len(rows) <= B). Slots past `upto` hold old,
    keys and values, finite unless the cache is raw_past_lengths, as a spare's are."""
    groups, row_shape = slots.shape[0], slots.shape[2:]
    size = groups * len(rows) * int(np.prod(row_shape))
    new = slots.view(-1)[:size].view((groups, len(rows)) + row_shape)
    old_rows, new_rows = slots.numpy(), new.numpy()
    for g in range(groups):
        new_rows[g, :, :, :upto] = old_rows[g, rows, :, :upto]  # the right side is a copy
    return new


def _fresh_slots(like: torch.Tensor, shape: tuple[int, ...], zeroed: bool) -> torch.Tensor:
    """A new slot tensor: zeros, or uninitialized memory for a cache whose calls never read a slot
    they have not written (KVCache.lockstep)."""
    return like.new_zeros(shape) if zeroed else like.new_empty(shape)


def _copy_rows(new: torch.Tensor, old: torch.Tensor, rows: torch.Tensor, upto: int) -> None:
    """new[:, :, :, :upto] = old[:, rows, :, :upto] (slot tensors, rows on dim 1)."""
    if _numpy_ok(new):
        new.numpy()[:, :, :, :upto] = old.numpy()[:, rows.numpy(), :, :upto]
    else:
        new[:, :, :, :upto].copy_(old[:, :, :, :upto].index_select(1, rows))


@dataclass
class LayerCache:
    keys: torch.Tensor  # (B, H, capacity, head_dim)
    values: torch.Tensor
    cross_keys: torch.Tensor | None = None  # (B, H, S, head_dim)
    cross_values: torch.Tensor | None = None
    pending_keys: torch.Tensor | None = None  # (B, H, N, T, head_dim) of the last call
    pending_values: torch.Tensor | None = None


@dataclass
class KVCache:
    layers: list[LayerCache]  # their keys and values are views of `slots`
    lengths: torch.Tensor  # (B,) int64: valid cached tokens per row
    src_pad_mask: torch.Tensor | None = None  # (B, S) True where the source is padding
    capacity: int = 0
    _arange: torch.Tensor = field(default_factory=lambda: torch.arange(0))
    # The last decoder call was a lean one: its keys/values already sit in their slots, so `commit`
    # only counts them (see Attention.self_in_place).
    written_in_place: bool = False
    _src_mask: tuple[torch.Tensor, torch.Tensor | None] | None = None  # (src_pad_mask, its attention mask)
    # Every layer's self-attention keys and values in one tensor (2 * layers, B, H, capacity, head_dim):
    # layer i's keys are slots[2 * i], its values slots[2 * i + 1]. A beam step reorders rows every
    # call, and one indexing operation over all layers costs a fraction of one per tensor.
    slots: torch.Tensor | None = None
    # The slots tensor a reorder of the same batch size writes into next (the one it replaced), off the
    # NumPy path: allocating fresh full-capacity slots each step cost a fifth of a beam step.
    _spare: torch.Tensor | None = None
    # (B,) int64: the row of the slot tensors each cache row reads and writes, for a view of a row pool
    # (RowPool.view: the native engine reads the pool in place); None: row b is row b of the slots.
    slot_rows: torch.Tensor | None = None
    # (B,) int64: the row of the cross-attention keys/values and of src_pad_mask each cache row reads, which
    # stay in place, one row per query (share_memory: beam and greedy search on the native engine); None: row b.
    cross_rows: torch.Tensor | None = None
    # What an engine keeps for this cache between calls (native.py: the C call's pointer tables); the
    # engine checks it against the cache's tensors before each use.
    engine_state: object | None = None
    # Every row holds as many tokens as every other at each call (beam search: its slots advance
    # together), so no call reads a slot past the rows' common length, which every row has written:
    # a reorder that needs new slots may leave them uninitialized. Zeroing them made a forward query's
    # beam search in 5 writings 4% slower (README, "Measured speed").
    lockstep: bool = False
    # Slots past a row's length may hold uninitialized memory: the cache was made unzeroed for the native
    # engine, whose lean call reads no slot past its row's length (Model.new_cache). Any other reader attends
    # over masked slots too (0 * NaN is NaN), so it calls zero_past_lengths first (Model.decode does). A greedy
    # search's slots are sized for outputs twice a source's length; zeroing them all took 0.16 of 2.0 s of a
    # forward greedy search of 200 queries at batch 8 and 32 (int8, one thread; session 70), and leaving them
    # made the search 2-7% faster (the kernel still clears the pages a search touches).
    raw_past_lengths: bool = False

    @classmethod
    def empty(cls, n_layers: int, batch: int, n_heads: int, head_dim: int, capacity: int,
              device: torch.device, dtype: torch.dtype, zeroed: bool = True) -> "KVCache":
        """zeroed=False: the slots are left uninitialized, for a cache whose calls never read a slot no row has
        written (lockstep)."""
        slots = _fresh_slots(torch.empty(0, device=device, dtype=dtype),
                             (2 * n_layers, batch, n_heads, capacity, head_dim), zeroed)
        layers = [LayerCache(slots[2 * i], slots[2 * i + 1]) for i in range(n_layers)]
        lengths = torch.zeros(batch, dtype=torch.long, device=device)
        return cls(layers, lengths, capacity=capacity, _arange=torch.arange(capacity, device=device), slots=slots)

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    def max_length(self) -> int:
        return int(self.lengths.max()) if self.lengths.numel() else 0

    def uniform_length(self) -> int | None:
        """The cached length shared by every row, or None when rows differ."""
        if self.lengths.numel() == 1:
            return int(self.lengths[0])
        low, high = torch.aminmax(self.lengths)
        return int(low) if bool(low == high) else None

    def src_attention_mask(self) -> torch.Tensor | None:
        """(B, 1, 1, S) True where a source token may be attended; None when no row has padding.
        Computed once per source mask."""
        if self.src_pad_mask is None:
            raise RuntimeError("the cache has no source memory")
        if self._src_mask is None or self._src_mask[0] is not self.src_pad_mask:
            mask = ~self.src_pad_mask[:, None, None, :] if bool(self.src_pad_mask.any()) else None
            self._src_mask = (self.src_pad_mask, mask)
        return self._src_mask[1]

    def zero_past_lengths(self) -> None:
        """Zeros in every slot past its row's length, once, where those may hold uninitialized memory
        (raw_past_lengths); the rows' prefixes, which calls wrote, are kept."""
        if not self.raw_past_lengths or self.slots is None:
            return
        past = self._arange >= self.lengths.unsqueeze(1)  # (B, capacity)
        self.slots.masked_fill_(past[None, :, None, :, None], 0.0)
        self.raw_past_lengths = False

    def slot_indices(self, upto: int) -> torch.Tensor:
        """0..upto-1 on the cache's device (made once per cache)."""
        return self._arange[:upto]

    def in_place_mask(self, start: int | None, upto: int, t_new: int) -> torch.Tensor | None:
        """What t_new tokens written in place after each row's prefix may attend, True = may: token t
        of row b sees the row's prefix and the new tokens up to t. (t_new, upto) when every row has
        length `start`, else (B, 1, t_new, upto); None when that is everything (one token, one length)."""
        device = self.lengths.device
        if start is not None:  # a lone query, or the beams of a beam step: one mask for all rows
            return torch.ones(t_new, upto, dtype=torch.bool, device=device).tril(start) if t_new > 1 else None
        reach = self.lengths[:, None] + torch.arange(t_new, device=device)  # (B, T)
        return (self.slot_indices(upto) <= reach[:, :, None]).unsqueeze(1)  # (B, 1, T, upto)

    def prefix_mask(self, upto: int) -> torch.Tensor:
        """(B, upto) True where a slot is past the row's valid length (masked)."""
        return self._arange[:upto].unsqueeze(0) >= self.lengths.unsqueeze(1)

    def commit(self, n_keep: torch.Tensor, branch: torch.Tensor | None = None) -> None:
        """Append the first n_keep[b] tokens of branch[b] from the last call to row b's prefix.

        Rows with n_keep == 0 are left untouched (their slots are not written), so a caller may feed
        placeholder tokens to rows it does not want to extend.
        """
        first = self.layers[0].pending_keys
        if first is None:
            raise RuntimeError("commit() without a preceding decoder call")
        n_keep = n_keep.to(self.lengths)
        if self.written_in_place:
            for layer in self.layers:
                layer.pending_keys = layer.pending_values = None
            self.written_in_place = False
            self.lengths = self.lengths + n_keep
            return
        batch, _, n_branches, t_new, _ = first.shape
        device = self.lengths.device
        write = n_keep > 0
        rows = torch.arange(batch, device=device)
        if branch is None:
            branch = torch.zeros(batch, dtype=torch.long, device=device)
        if not bool(write.all()):
            rows, branch = rows[write], branch[write]
        if len(rows) and int((self.lengths[rows] + t_new).max()) > self.capacity:
            raise RuntimeError(f"KV cache capacity {self.capacity} exceeded")
        # Write all T tokens of the chosen branch; those past n_keep stay masked by `lengths`.
        slot = self.lengths[rows].unsqueeze(1) + torch.arange(t_new, device=device)  # (R, T)
        for layer in self.layers:
            assert layer.pending_keys is not None and layer.pending_values is not None
            for store, new in ((layer.keys, layer.pending_keys), (layer.values, layer.pending_values)):
                chosen = new[rows, :, branch] if n_branches > 1 or len(rows) < batch else new[:, :, 0]  # (R, H, T, hd)
                if len(rows) == batch:
                    store.scatter_(2, slot[:, None, :, None].expand_as(chosen), chosen)
                else:
                    store[rows[:, None], :, slot] = chosen.permute(0, 2, 1, 3)  # (R, T, H, hd)
            layer.pending_keys = layer.pending_values = None
        self.lengths = self.lengths + n_keep

    def rollback(self, lengths: torch.Tensor) -> None:
        """Shorten rows to `lengths` (never longer than now); nothing is copied."""
        if bool((lengths > self.lengths).any()):
            raise ValueError("rollback cannot extend a row")
        self.lengths = lengths.to(self.lengths).clone()

    def point_at(self, slots: torch.Tensor) -> None:
        """Make `slots` the cache's slot tensor, its layers' keys and values views of it."""
        self.slots = slots
        for i, layer in enumerate(self.layers):
            layer.keys, layer.values = slots[2 * i], slots[2 * i + 1]

    def share_memory(self, rows: torch.Tensor) -> None:
        """Row i becomes old row rows[i], as reorder does, reading old row rows[i]'s cross-attention keys and
        values in place (cross_rows) rather than a copy of them: beam search's slots share their query's, and
        greedy search's rows keep theirs in place as finished rows leave. Only the native engine's lean call
        reads cross_rows (model.decode gives the rows copies, own_memory, before any other call). A copy per
        slot (reorder) read width times the source memory each call: the retro model at width 10 holds
        megabytes."""
        shared = rows if self.cross_rows is None else self.cross_rows.index_select(0, rows)
        self.reorder(rows, cross=False)
        self.cross_rows = shared.contiguous()

    def own_memory(self) -> None:
        """Give each row its own copy of the memory it shares (cross_rows), for an engine that reads rows of
        the memory as rows of the cache: model.decode, before a call the native engine's lean path does not
        take. Nothing where no row shares."""
        if self.cross_rows is None:
            return
        rows = self.cross_rows
        for layer in self.layers:
            if layer.cross_keys is not None and layer.cross_values is not None:
                layer.cross_keys = layer.cross_keys.index_select(0, rows)
                layer.cross_values = layer.cross_values.index_select(0, rows)
        if self.src_pad_mask is not None:
            self.src_pad_mask = self.src_pad_mask.index_select(0, rows)
        self.cross_rows = None

    def branch_copies(self, rows: torch.Tensor, extra: int) -> "KVCache":
        """A cache of copies of `rows` (a row may be named several times: a copy for each of its drafts, which the
        native engine's lean call then feeds as rows of their own), their slots up to the longest of them plus
        `extra` new tokens, reading this cache's cross-attention memory in place (cross_rows). Slots past a row's
        length are copied as they are (raw_past_lengths where this cache's are)."""
        upto = int(self.lengths[rows].max()) + extra
        if self.slots is None or upto > self.capacity:
            raise RuntimeError(f"KV cache capacity {self.capacity} exceeded")
        copies = self.slots[:, rows, :, :upto]  # (2 * layers, R, H, upto, hd): a copy
        layers = [LayerCache(copies[2 * i], copies[2 * i + 1], layer.cross_keys, layer.cross_values)
                  for i, layer in enumerate(self.layers)]
        shared = rows if self.cross_rows is None else self.cross_rows.index_select(0, rows)
        return KVCache(layers, self.lengths.index_select(0, rows), self.src_pad_mask, upto, self._arange[:upto],
                       slots=copies, cross_rows=shared.contiguous(), raw_past_lengths=self.raw_past_lengths)

    def keep_branches(self, rows: torch.Tensor, copies: "KVCache", chosen: torch.Tensor) -> None:
        """Row rows[i] takes the tokens that row chosen[i] of `copies` (this cache's branch_copies) kept in its last
        call, past rows[i]'s length: the draft branch the call chose for the row, and its new length."""
        if self.slots is None or copies.slots is None:
            raise RuntimeError("keep_branches needs the slots tensors of both caches")
        starts, ends = self.lengths[rows], copies.lengths[chosen]
        # (R, W) slots: within both caches, as W is at most the tokens a call fed and copies ends where they end
        slot = starts.unsqueeze(1) + torch.arange(int((ends - starts).max()), device=starts.device)
        self.slots[:, rows.unsqueeze(1), :, slot] = copies.slots[:, chosen.unsqueeze(1), :, slot]
        self.lengths[rows] = ends

    def reorder(self, rows: torch.Tensor, *, cross: bool = True) -> None:
        """Row i becomes old row rows[i] (beams, or dropping finished rows).

        Only the used prefix of the slots is copied. cross=False keeps the cross-attention memory
        in place, which is right when rows move only among beams of the same query. On CPU a reorder
        that keeps the batch size moves only the rows that change, in place (a beam step keeps two
        thirds of its rows where they are: measured, retro model, width 10), and one that drops finished
        rows moves the kept ones down in the same memory (`_compacted`).
        """
        upto = self.max_length()
        same_batch = len(rows) == self.batch_size
        slots = self.slots
        if slots is None:
            raise RuntimeError("reorder needs the cache's slots tensor (KVCache.empty or RowPool.gather makes one)")
        order = rows.numpy() if _numpy_ok(slots) else None
        if order is not None and same_batch:
            moved = np.flatnonzero(order != np.arange(len(order)))
            if len(moved):
                array = slots.numpy()
                array[:, moved, :, :upto] = array[:, order[moved], :, :upto]  # the right side is a copy
        elif order is not None and slots.is_contiguous() and _keeps_some_in_order(order, self.batch_size):
            self.point_at(_compacted(slots, order, upto))
            self._spare = None
        else:
            # Zeros, not empty, unless in lockstep or raw past the lengths: masked slots still meet the values
            # matmul with weight 0, and 0 * NaN from uninitialized memory would poison the row. A spare holds old
            # keys, finite unless raw.
            spare = self._spare if same_batch else None
            shape = (slots.shape[0], len(rows)) + slots.shape[2:]
            new = spare if spare is not None else _fresh_slots(slots, shape,
                                                                zeroed=not (self.lockstep or self.raw_past_lengths))
            _copy_rows(new, slots, rows, upto)
            self._spare = slots if same_batch else None
            self.point_at(new)
        shared = self.cross_rows is not None  # the memory stays in place: only the rows' pointers into it move
        for layer in self.layers:
            if cross and not shared and layer.cross_keys is not None and layer.cross_values is not None:
                layer.cross_keys = layer.cross_keys.index_select(0, rows)
                layer.cross_values = layer.cross_values.index_select(0, rows)
            layer.pending_keys = layer.pending_values = None
        self.written_in_place = False
        self.lengths = self.lengths.index_select(0, rows)
        if shared and self.cross_rows is not None:
            self.cross_rows = self.cross_rows.index_select(0, rows)
        elif cross and self.src_pad_mask is not None:
            self.src_pad_mask = self.src_pad_mask.index_select(0, rows)


class RowPool:
    """Cache rows owned by the hypotheses of one query (speculative beam search), not by beam slots.

    All layers' self-attention keys and values live in one tensor (2 * layers, rows, H, capacity,
    head_dim), so gathering rows to feed, writing their new tokens back and copying a row are one
    indexing operation each. The cross-attention memory is the query's, shared by every row.
    """

    def __init__(self, base: KVCache, rows: int, zeroed: bool = True):
        """zeroed=False: new rows are left uninitialized, for a pool that the C decoder step reads in
        place (it reads a row's slots up to its length, never past); `gather` zeroes the unwritten
        slots of its copies, which other steps read as masked keys (weight 0: 0 * NaN from
        uninitialized memory would poison the row). Zeroing the whole pool of the retro model at
        width 10 cost about 12 ms per query (tens of MB)."""
        first = base.layers[0].keys
        if base.batch_size != 1:
            raise ValueError("a row pool holds one query")
        self.base, self.capacity, self.zeroed = base, base.capacity, zeroed
        self.store = self._new((2 * len(base.layers), rows) + first.shape[1:])
        self._view: KVCache | None = None  # see view

    def _new(self, shape: tuple[int, ...]) -> torch.Tensor:
        first = self.base.layers[0].keys
        return first.new_zeros(shape) if self.zeroed else first.new_empty(shape)

    @property
    def rows(self) -> int:
        return int(self.store.shape[1])

    def add_rows(self, n: int) -> None:
        more = self._new((self.store.shape[0], n) + self.store.shape[2:])
        # The first rows are the new tensor itself: a copy of tens of MB costs as much as a step's work.
        self.store = torch.cat([self.store, more], dim=1) if self.rows else more

    def view(self, rows: torch.Tensor, lengths: torch.Tensor) -> KVCache:
        """The pool itself as a cache of `rows` (int64, distinct), valid up to `lengths`: a decoder call
        on it reads those rows and writes its new tokens' keys/values into them, past `lengths`, with
        no gather and no write-back. Only the native engine reads such a cache (KVCache.slot_rows); the
        same view object is reused while the pool's tensor stays the same."""
        view = self._view
        if view is None or view.slots is not self.store:
            layers = [LayerCache(self.store[2 * i], self.store[2 * i + 1], layer.cross_keys, layer.cross_values)
                      for i, layer in enumerate(self.base.layers)]
            view = self._view = KVCache(layers, lengths, self.base.src_pad_mask, self.capacity, self.base._arange,
                                        slots=self.store)
        view.lengths, view.slot_rows, view.written_in_place = lengths.to(self.base.lengths).clone(), rows, False
        return view

    def copy_row(self, source: int, target: int, upto: int) -> None:
        """Row `target` gets row `source`'s first `upto` slots (a hypothesis branching in two)."""
        self.store[:, target, :, :upto] = self.store[:, source, :, :upto]

    def gather_bytes(self, n_rows: int, upto: int) -> int:
        """The bytes a gather of n_rows rows, `upto` slots each, copies."""
        layers2, _, heads, _, head_dim = self.store.shape
        return layers2 * n_rows * heads * upto * head_dim * self.store.element_size()

    def gather(self, rows: torch.Tensor, lengths: torch.Tensor, extra: int) -> KVCache:
        """A cache holding copies of `rows`, valid up to `lengths`, with room for `extra` new tokens.
        Slots past a row's length are read as masked keys, so they must be finite: zeros in the copy
        where the pool is not zeroed."""
        upto = int(lengths.max()) + extra
        if upto > self.capacity:
            raise RuntimeError(f"KV cache capacity {self.capacity} exceeded")
        sub = self.store[:, rows, :, :upto]
        if not self.zeroed:
            unwritten = torch.arange(upto, device=lengths.device) >= lengths.unsqueeze(1)  # (R, upto)
            sub.masked_fill_(unwritten[None, :, None, :, None], 0.0)
        layers = [LayerCache(sub[2 * i], sub[2 * i + 1], layer.cross_keys, layer.cross_values)
                  for i, layer in enumerate(self.base.layers)]
        return KVCache(layers, lengths.to(self.base.lengths).clone(), self.base.src_pad_mask, upto,
                       self.base._arange[:upto], slots=sub)

    def write(self, rows: torch.Tensor, fed: KVCache, branch: torch.Tensor, fed_rows: torch.Tensor | None = None
              ) -> None:
        """Store the keys/values of each row's chosen branch from the last call on `fed` (a gathered
        cache) in the pool, from the row's length on. fed_rows: the row of `fed` that holds rows[i]'s call
        (None: row i), where a call fed each branch as a row of its own."""
        pending = [t for layer in fed.layers for t in (layer.pending_keys, layer.pending_values)]
        if any(t is None for t in pending):
            raise RuntimeError("write() without a preceding decoder call")
        index = torch.arange(len(rows), device=rows.device) if fed_rows is None else fed_rows.to(rows.device)
        chosen = torch.stack([t[index, :, branch] for t in pending])  # (2L, R, H, T, hd)
        slot = fed.lengths[index].unsqueeze(1) + torch.arange(chosen.shape[3], device=rows.device)  # (R, T)
        self.store[:, rows.unsqueeze(1), :, slot] = chosen.permute(1, 3, 0, 2, 4)  # (R, T, 2L, H, hd)

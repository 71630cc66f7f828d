from ratchet.engine.models.packing import left_padded, token_batches


def test_token_batches_close_a_batch_at_its_row_or_token_limit() -> None:
    # Rows of 100 tokens with 20-token replies take 120 cells each.
    assert token_batches([100] * 5, 20, 2, None) == [range(0, 2), range(2, 4), range(4, 5)]
    assert token_batches([100] * 5, 20, 16, 360) == [range(0, 3), range(3, 5)]
    # A long prompt widens every row of its batch: [10, 10, 200] would take 3 x 220 cells.
    assert token_batches([10, 10, 200, 10], 20, 16, 500) == [range(0, 2), range(2, 4)]
    # A prompt over the budget on its own still gets a batch; nothing is dropped.
    assert token_batches([50, 900, 50], 20, 16, 200) == [range(0, 1), range(1, 2), range(2, 3)]
    assert token_batches([], 20, 16, 200) == []


def test_left_padding_aligns_every_row_on_its_last_token() -> None:
    inputs = left_padded([[5, 6, 7], [8]], pad_id=0)
    assert inputs["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert inputs["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]

"""What `datasets.load_dataset` returns for a split of a hub-shaped fixture, shared by the fixture servers."""
import datasets


def pick(dd: datasets.DatasetDict, split: str | None):
    """Every split for None, else the one asked for, with datasets' own message for a split the repo lacks."""
    if split is None:
        return dd
    if split not in dd:
        raise ValueError(f'Unknown split "{split}". Should be one of {list(dd)}.')
    return dd[split]

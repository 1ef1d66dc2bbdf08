import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one intra-op thread is faster, and immune to a busy machine's oversubscription."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

"""Fixtures the layer_fusion tests share: `hub` serves tests/fixtures/hub (each a copy of a hub dataset's layout) in
place of datasets.load_dataset, as tests/test_hub_tasks.py does for every hub task."""
from tests.test_hub_tasks import hub  # noqa: F401

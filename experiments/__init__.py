"""strata's shared machinery: the one runner, data, models, the Full fine-tuning baseline, metrics, the
activation store, results and reports. The only package that knows Hydra."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # the checkout: conf/, results/ and the paper packages live here

"""respot: train ML models on spot GPUs, checkpointed to S3 and resumed after every interruption."""

__version__ = "0.1.0"

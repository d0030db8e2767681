"""A small resumable training job for sweeps: logistic regression on scikit-learn's digits."""

"""The digits example: a small PyTorch MLP on scikit-learn's 8x8 digits, on CPU."""

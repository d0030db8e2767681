"""The embedded local runtime: respot's handlers and agent on one machine, against moto."""

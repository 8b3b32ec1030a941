"""What is sampled while a cell trains (docs/architecture.md): one small sampler per source."""

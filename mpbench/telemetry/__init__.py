"""What is sampled while a cell trains (DESIGN §4): one small sampler per source."""

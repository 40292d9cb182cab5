"""Architecture families the search explores: model code, knobs and ranges, FLOP accounting."""

"""The GRPO learner: the only part of gymhub that imports torch."""

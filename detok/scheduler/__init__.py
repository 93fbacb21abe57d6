"""The scheduler side: SchedulerClient, its replay book and journal, step logprob columns."""

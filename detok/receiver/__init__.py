"""The frontend side: DeltaReceiver, request streams, logprob entries."""

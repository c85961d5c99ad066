// ParleyNetSim: seeded network impairment models (loss, bursts, delay and jitter,
// reordering, duplication, rate limits, clock drift) and the UDP impairment proxy.

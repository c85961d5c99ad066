// ParleyRelay: the selective forwarding relay — rooms, participants, join and token
// auth, forwarding, RTCP termination, limits, metrics. Links no audio library.

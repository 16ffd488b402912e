"""How early a timed wait may end on the test loop."""

# uvloop's timers have libuv's millisecond resolution: a sleep may end up to 1 ms before its
# time, so a lower bound on a measured wait allows two ticks.
TIMER_TICK = 0.002

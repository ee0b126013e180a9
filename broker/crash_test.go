package broker

const crashChildEnv = "AUTONOMIC_BROKER_CRASH_CHILD"

func crashChild() int { return 2 }

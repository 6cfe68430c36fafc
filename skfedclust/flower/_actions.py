"""The message types of skfedclust's Flower protocol (no imports: the thin ClientApp reads them)."""

HELLO = "query.skfedclust_hello"
STEP = "query.skfedclust_step"
FINISH = "query.skfedclust_finish"

# why the float32 winner differs when every vote presence of a part is 0
from common import *

lp = np.array([-3.2, -1.1, -7.5, -2.0], np.float32)  # per-object log N(x|vote)
joint32 = np.float32(-1e8) + lp
print(
    "float32 joint (-1e8 + lp):",
    joint32,
    "-> argmax",
    joint32.argmax(),
    " float64 argmax",
    (np.float64(-1e8) + lp.astype(np.float64)).argmax(),
)
tf.reset_default_graph()
print("tf.argmax float32:", run(tf.argmax(tf.constant(joint32), 0)))

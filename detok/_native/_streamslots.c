/* RequestStream's attribute names for push_rows (see _streamslots.h). */
#include "_streamslots.h"

PyObject *detok_slot_names[N_STREAM_SLOTS];

int detok_streamslots_init(void) {
    static const char *names[N_STREAM_SLOTS] = {
        [SL_PUSH_QUEUED] = "_push_queued", [SL_FINISH] = "finish", [SL_TYPED] = "_typed", [SL_CHUNKS] = "_chunks",
        [SL_LOGPROBS] = "_logprobs", [SL_RECEIVED] = "_received", [SL_PUSHER] = "_pusher", [SL_WAITER] = "_waiter",
        [SL_TOKENS] = "_tokens", [SL_PUSH_ERROR] = "_push_error", [SL_NEXT_TOKEN] = "_next_token",
    };
    for (int i = 0; i < N_STREAM_SLOTS; i++)
        if ((detok_slot_names[i] = PyUnicode_InternFromString(names[i])) == NULL) return -1;
    return 0;
}

/* Uses the installed headers and library: version, errors, a local task. */
#include <stdio.h>
#include <string.h>
#include <xtq/xtq.h>

int main(void)
{
    if (strcmp(xtq_version(), XTQ_VERSION_STRING) != 0)
        return 1;
    xtq_signal_t *sig;
    if (xtq_signal_create(3, &sig) != 0)
        return 2;
    xtq_signal_add(sig, -3);
    int rc = xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, 1000000000, NULL);
    xtq_signal_destroy(sig);
    printf("consumer: libxtq %s, %s, wait=%d\n", xtq_version(), xtq_errname(-XTQ_ENOKERNEL), rc);
    return rc == 0 ? 0 : 3;
}

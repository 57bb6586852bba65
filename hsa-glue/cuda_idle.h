/*
 * CUDA agent: the host's half of the processor that exits when idle
 * (XTQ_CUDA_IDLE_EXIT_US). Plain C, no CUDA: the CPU unit test
 * (tests/unit/test_cuda_idle.c) runs it against a model of the device.
 *
 * Why: the persistent processor keeps the device busy, so every call that
 * waits for an idle device (cudaDeviceSynchronize, cudaFree, cudaFreeHost,
 * cudaHostUnregister, a lazy module load) waits for ever beside it. With
 * the parameter set, the processor exits after that long without a packet
 * and the host launches it again for the next one.
 *
 * The handshake, on ctl->state in mapped host memory (cuda_abi.h):
 *
 *   host (enqueue, any thread)        processor (block 0, thread 0)
 *   A1 store the packet               D1 state = EXITING
 *      (inline lines, ring header)    D2 fence.sc.sys (__threadfence_system)
 *   A2 fence seq_cst (mfence)         D3 read every queue's next slot and
 *   A3 read state                        the table version
 *   A4 not RUNNING: ask the retire    D4 found something: state = RUNNING
 *      thread to relaunch                nothing: stop flag, state = STOPPED,
 *                                        exit
 *
 * Dekker's pattern: each side stores, fences fully, then loads what the
 * other stored. With both fences sequentially consistent at system scope,
 * A3 and D3 cannot both read the value from before the other's store:
 * either D3 sees the packet (the processor goes on and runs it), or A3
 * sees EXITING or STOPPED (the retire thread relaunches). Both may happen:
 * the processor goes on and the retire thread, finding RUNNING and the
 * kernel alive, does nothing. So a packet is never left behind. It never
 * runs twice: the processor advances its read position (dev->q[].rd, in
 * device memory) before it runs a packet, and a relaunched processor
 * starts from there, as after processor_stop/processor_start. A queue
 * created while it exits: its descriptor and the table version are copied
 * (and waited for) before any packet of it is stored, so D3's version
 * check is ordered the same way.
 *
 * The relaunch happens on the retire thread, under the agent's lock, never
 * on the enqueuing thread (which may hold engine locks): the doorbell only
 * sets a flag and wakes it. A producer that rings no doorbell is covered
 * by the retire thread itself: pending packets and a processor not RUNNING
 * send it the same way. The host writes RUNNING before every launch;
 * afterwards only the processor writes the state. A processor the host
 * stopped (attach, detach, quiesce, deregister) leaves it RUNNING, so
 * doorbells meanwhile ask for nothing: whoever stopped it starts it.
 */
#ifndef XTQ_CUDA_IDLE_H
#define XTQ_CUDA_IDLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <xtq/cuda_abi.h>

/* What the retire thread does for a processor that may have exited. */
enum xtq__cuda_wake {
    XTQ__CUDA_WAKE_NONE,     /* running (or stopped by the host): nothing */
    XTQ__CUDA_WAKE_WAIT,     /* deciding (EXITING): look again shortly */
    XTQ__CUDA_WAKE_RELAUNCH, /* exited idle: wait for the kernel's end, launch */
    XTQ__CUDA_WAKE_DEAD,     /* gone without saying so: a fault, not an idle exit */
};

/* A full fence (mfence on x86-64). The same build runs under TSan, which
 * does not model a stand-alone fence (GCC says so with -Wtsan): the fence
 * stays, the warning is silenced, as for the CPU agent's packet fences. */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void xtq__cuda_idle_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/*
 * After the packet's stores (A1): fence (A2), then read the state (A3).
 * True when the processor is exiting or gone and must be relaunched.
 * `state` is ctl->state; the fence is what makes the handshake work, so
 * it is here rather than left to the caller.
 */
static inline bool xtq__cuda_idle_after_publish(const volatile uint32_t *state)
{
    xtq__cuda_idle_fence();
    return atomic_load_explicit((const _Atomic uint32_t *)(uintptr_t)state, memory_order_relaxed) !=
           XTQ__CUDA_PROC_RUNNING;
}

/*
 * The retire thread's decision, under the agent's lock. `host_running`:
 * the host launched a processor and has not stopped it; `state`:
 * ctl->state; `kernel_busy`: its stream still has the kernel.
 */
static inline enum xtq__cuda_wake xtq__cuda_wake_action(bool host_running, uint32_t state,
                                                        bool kernel_busy)
{
    if (!host_running)
        return XTQ__CUDA_WAKE_NONE; /* stopped by the host, which starts it again */
    switch (state) {
    case XTQ__CUDA_PROC_STOPPED:
        return XTQ__CUDA_WAKE_RELAUNCH; /* its last stores done: the kernel ends now */
    case XTQ__CUDA_PROC_EXITING:
        return kernel_busy ? XTQ__CUDA_WAKE_WAIT : XTQ__CUDA_WAKE_DEAD;
    case XTQ__CUDA_PROC_RUNNING:
        return kernel_busy ? XTQ__CUDA_WAKE_NONE : XTQ__CUDA_WAKE_DEAD;
    default:
        return XTQ__CUDA_WAKE_DEAD; /* no state of ours */
    }
}

#endif /* XTQ_CUDA_IDLE_H */

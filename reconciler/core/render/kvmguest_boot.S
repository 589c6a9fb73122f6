# proxyfleet's KVM probe: a boot sector that walks the mode switches a real guest makes
# (SeaBIOS hands over in real mode; a bootloader enters protected mode, returns from an
# interrupt frame there, and the kernel enters long mode) and leaves a marker at physical
# 0x500 after each step, so the probe can read how far the guest got.
	.code16
	.globl _start
_start:
	cli
	xorw %ax, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	movw $0x7c00, %sp
	movl $0x314d5650, 0x500		# "PVM1": real mode, our code runs
	movl $0x00000000, 0x504
	lgdtl gdtr
	movl %cr0, %eax
	orl $1, %eax
	movl %eax, %cr0
	ljmpl $0x08, $pm32
	.code32
pm32:
	movw $0x10, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	movw %ax, %fs
	movw %ax, %gs
	movl $0x7c00, %esp
	movl $0x324d5650, 0x500		# "PVM2": 32-bit protected mode
	pushfl
	pushl $0x08
	pushl $after_iret
	iretl
after_iret:
	movl $0x334d5650, 0x500		# "PVM3": an iret in protected mode
	movl $0x1000, %edi
	xorl %eax, %eax
	movl $3072, %ecx
	rep stosl
	movl $0x2003, 0x1000		# PML4[0] -> PDPT
	movl $0x3003, 0x2000		# PDPT[0] -> PD
	movl $0x83, 0x3000		# PD[0]: 2 MiB page at 0, present, writable
	movl $0x1000, %eax
	movl %eax, %cr3
	movl %cr4, %eax
	orl $0x20, %eax			# PAE
	movl %eax, %cr4
	movl $0xc0000080, %ecx		# EFER
	rdmsr
	orl $0x100, %eax		# LME
	wrmsr
	movl %cr0, %eax
	orl $0x80000000, %eax		# PG
	movl %eax, %cr0
	ljmpl $0x18, $lm64
	.code64
lm64:
	movl $0x344d5650, 0x500		# "PVM4": 64-bit long mode with paging
	movl $0x4b4f4b4f, 0x504		# "OKOK"
halt:
	cli
	hlt
	jmp halt
	.p2align 3
gdt:
	.quad 0
	.quad 0x00cf9a000000ffff	# 0x08: code, 32-bit
	.quad 0x00cf92000000ffff	# 0x10: data
	.quad 0x00af9a000000ffff	# 0x18: code, 64-bit
gdtr:
	.word gdtr - gdt - 1
	.long gdt
	.org 510
	.word 0xaa55

! Second Fortran test program, run on N = 4, built three times: with the mpif.h
! bindings, with -DBL_USE_MPI through `use mpi` (the same integer handles), and with
! -DBL_F08 through `use mpi_f08` (handles as TYPE(MPI_Comm), ...); the same calls, so
! the same trace is expected:
!   MPI_Gatherv to root 0: rank r sends r+1 integers (root receives i+1 from rank i);
!   MPI_Scatterv from root 0: rank i receives 2(i+1) integers;
!   MPI_Allgatherv: rank r contributes r+1 integers;
!   MPI_Sendrecv of 6 integers (24 B) tag 14 to right / from left;
!   Irecv(left)+Isend(right) of 4 integers completed by: MPI_Waitany twice (tag 11),
!   MPI_Waitsome until both are done (tag 12), MPI_Testall until done (tag 13),
!   MPI_Testany until both are done (tag 15), MPI_Testsome until both are done (tag 16);
!   MPI_Comm_split_type(SHARED) + MPI_Bcast of 3 integers on it; MPI_Cart_create
!   (1-D, periodic) + MPI_Barrier on it; MPI_Cart_sub + MPI_Allreduce of 2 integers on
!   it; MPI_Comm_create of the even ranks + MPI_Barrier on it (members only).
program fortran2_test
#ifdef BL_F08
  use mpi_f08
  implicit none
#elif defined(BL_USE_MPI)
  use mpi
  implicit none
#else
  implicit none
  include 'mpif.h'
#endif
  integer :: ierr, r, n, right, left, i, idx, outcount, done, nsub
  integer :: a(64), b(64), sc(4), sd(4), rc(4), rd(4)
  integer :: idxs(2)
#ifdef BL_F08
  type(MPI_Request) :: reqs(2)
  type(MPI_Status) :: sts(2), st
  type(MPI_Comm) :: shm, cart, sub, evencomm
  type(MPI_Group) :: grp, evengrp
#else
  integer :: reqs(2), sts(MPI_STATUS_SIZE, 2), st(MPI_STATUS_SIZE)
  integer :: shm, cart, sub, grp, evengrp, evencomm
#endif
  integer :: dims(1), evens(2)
  logical :: periods(1), remain(1), flag
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, r, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  right = mod(r + 1, n)
  left = mod(r - 1 + n, n)
  a = r
  do i = 1, n
    rc(i) = i
    rd(i) = 8 * (i - 1)
    sc(i) = 2 * i
    sd(i) = 8 * (i - 1)
  end do
  call MPI_Gatherv(a, r + 1, MPI_INTEGER, b, rc, rd, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call MPI_Scatterv(a, sc, sd, MPI_INTEGER, b, 2 * (r + 1), MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call MPI_Allgatherv(a, r + 1, MPI_INTEGER, b, rc, rd, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call MPI_Sendrecv(a, 6, MPI_INTEGER, right, 14, b, 6, MPI_INTEGER, left, 14, &
                    MPI_COMM_WORLD, st, ierr)

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 11, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 11, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitany(2, reqs, idx, st, ierr)
  call MPI_Waitany(2, reqs, idx, MPI_STATUS_IGNORE, ierr)

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 12, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 12, MPI_COMM_WORLD, reqs(2), ierr)
  done = 0
  do while (done < 2)
    call MPI_Waitsome(2, reqs, outcount, idxs, sts, ierr)
    if (outcount /= MPI_UNDEFINED) done = done + outcount
  end do

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 13, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 13, MPI_COMM_WORLD, reqs(2), ierr)
  flag = .false.
  do while (.not. flag)
    call MPI_Testall(2, reqs, flag, MPI_STATUSES_IGNORE, ierr)
  end do

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 15, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 15, MPI_COMM_WORLD, reqs(2), ierr)
  done = 0
  do while (done < 2)
    call MPI_Testany(2, reqs, idx, flag, st, ierr)
    if (flag .and. idx /= MPI_UNDEFINED) done = done + 1
  end do

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 16, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 16, MPI_COMM_WORLD, reqs(2), ierr)
  done = 0
  do while (done < 2)
    call MPI_Testsome(2, reqs, outcount, idxs, MPI_STATUSES_IGNORE, ierr)
    if (outcount /= MPI_UNDEFINED) done = done + outcount
  end do

  call MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, shm, ierr)
  call MPI_Bcast(a, 3, MPI_INTEGER, 0, shm, ierr)
  dims(1) = n
  periods(1) = .true.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., cart, ierr)
  call MPI_Barrier(cart, ierr)
  remain(1) = .true.
  call MPI_Cart_sub(cart, remain, sub, ierr)
  call MPI_Comm_size(sub, nsub, ierr)
  call MPI_Allreduce(a, b, 2, MPI_INTEGER, MPI_SUM, sub, ierr)
  call MPI_Comm_group(MPI_COMM_WORLD, grp, ierr)
  evens(1) = 0
  evens(2) = 2
  call MPI_Group_incl(grp, 2, evens, evengrp, ierr)
  call MPI_Comm_create(MPI_COMM_WORLD, evengrp, evencomm, ierr)
  if (evencomm /= MPI_COMM_NULL) call MPI_Barrier(evencomm, ierr)
  call MPI_Finalize(ierr)
end program fortran2_test
